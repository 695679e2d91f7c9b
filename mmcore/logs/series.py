"""A metric series made ready to draw: TensorBoard-style smoothing (`ema`, with a weight chosen from the
series' noise by `auto_smoothing`) and thinning to what a chart can show (`thin_index`, at full resolution
where it is zoomed: `view_index`), in ways that let a growing series resend only its tail.

Pure numpy functions; `mmcore.logs.charts` builds the charts from them.
"""
import numpy as np
import pandas as pd

MAX_POINTS = 2000  # per trace (the lowest and highest point of up to 1,000 buckets): a full line at chart widths


def ema(values, weight):
    """TensorBoard's debiased exponential moving average of `values` with smoothing `weight` (0..<1).

    smoothed_i = last_i / (1 - weight ** n_i) with last_i = weight * last_(i-1) + (1 - weight) * v_i,
    n_i counting finite values so far. Non-finite values (nan, inf) pass through unchanged and do
    not count; a constant series is returned as is. weight 0 returns the values.
    """
    if not 0 <= weight < 1:
        raise ValueError(f"smoothing weight must be in [0, 1), got {weight}")
    y = np.asarray(values, dtype=np.float64)
    out = y.copy()
    finite = np.isfinite(y)
    if weight == 0 or not finite.any() or (finite.all() and (y == y[0]).all()):
        return out
    # pandas' adjusted EWM is the same sum, sum_k w^k v_(i-k) / sum_k w^k, computed in C.
    out[finite] = pd.Series(y[finite]).ewm(alpha=1 - weight, adjust=True).mean().to_numpy()
    return out


TREND_POINTS = 8192  # a long series' trend is taken from about this many of its points


def auto_smoothing(values, target=0.1, max_weight=0.99):
    """A smoothing weight for `values` chosen from their noise: the weight whose EMA leaves the noise
    at about `target` of the trend's range.

    White noise of std s through an EMA of weight w keeps std s * sqrt((1 - w) / (1 + w)); s is
    estimated from successive differences (robust: their median absolute deviation), the trend's
    range from a moving median over a tenth of the series (of every k-th point of a series longer
    than `TREND_POINTS`: a median of thousands of points needs no more, and a moving median is the
    costly part). A clean curve gets little or no smoothing; a noisy RL reward gets a lot. Fewer
    than 8 points are not smoothed.
    """
    y = np.asarray(values, dtype=np.float64)
    y = y[np.isfinite(y)]
    if len(y) < 8:
        return 0.0
    diffs = np.diff(y)
    noise = 1.4826 * np.median(np.abs(diffs - np.median(diffs))) / np.sqrt(2)
    sample = y[::max(1, len(y) // TREND_POINTS)]
    trend = pd.Series(sample).rolling(max(3, len(sample) // 10), center=True, min_periods=1).median()
    spread = float(trend.max() - trend.min())
    if noise <= 0:
        return 0.0
    if spread <= 0:
        return max_weight
    ratio = (target * spread / noise) ** 2
    weight = (1 - ratio) / (1 + ratio)
    return float(np.clip(round(weight, 2), 0.0, max_weight))


def thin_index(y, max_points=MAX_POINTS):
    """(index, stable) for series `y`: the positions of the points to draw (at most `max_points`, in
    order) and how many of them, from the first, stay the same when points are appended to `y`.

    Min/max per bucket: the series is cut into buckets of a power-of-two number of points and each
    keeps the positions of its lowest and highest value, plus the first and last point. A line
    through them looks like the full line at any width up to `max_points / 2` pixels and keeps every
    spike (a loss blow-up, a one-step reward dip), which a stride or a mean per bucket would hide and
    LTTB (one point per bucket, chosen by triangle area) may drop beside a larger one; it is also a
    few numpy calls. Because bucket sizes are powers of two, a growing run changes only its last
    bucket until it doubles: the points of its full buckets are `stable`, and a live chart need not
    send them again.
    """
    y = np.asarray(y, dtype=np.float64)
    n = len(y)
    if n <= max_points:
        return np.arange(n), n
    room = max(1, max_points // 2 - 1)  # buckets, leaving room for the first and last points
    size = 1
    while size * room < n:
        size *= 2
    buckets = -(-n // size)
    padded = np.full(buckets * size, np.nan)
    padded[:n] = y
    padded = padded.reshape(buckets, size)
    nan = np.isnan(padded)
    low = np.where(nan, np.inf, padded).argmin(axis=1)
    high = np.where(nan, -np.inf, padded).argmax(axis=1)
    starts = np.arange(buckets) * size
    index = np.unique(np.concatenate([[0, n - 1], starts + low, starts + high]))
    index = index[index < n]
    full = (n // size) * size  # the points of the full buckets (the last point may stop being kept)
    return index, int(np.searchsorted(index, min(full, n - 1)))


def view_index(x, y, view=None, max_points=MAX_POINTS):
    """(index, stable) as `thin_index` for a chart zoomed to the x range `view` (low, high): the
    points inside it at up to 80% of `max_points` (every point of a window that holds no more), the
    rest of the run at up to 10% on either side (its shape, so a pan or a zoom out shows something at
    once). Without a view, or with no point inside it: `thin_index(y)`."""
    if view is None:
        return thin_index(y, max_points)
    low = -np.inf if view[0] is None else view[0]
    high = np.inf if view[1] is None else view[1]
    inside = np.flatnonzero((x >= low) & (x <= high))
    if not len(inside):
        return thin_index(y, max_points)
    n, first, last = len(y), int(inside[0]), int(inside[-1]) + 1
    context = max(2, max_points // 10)
    parts, stable = [], 0
    for start, end, budget in ((0, first, context), (first, last, max_points - 2 * context), (last, n, context)):
        if end <= start:
            continue
        index, steady = thin_index(y[start:end], budget)
        parts.append(start + index)
        stable += steady if end == n else len(index)  # only the part that reaches the end grows
    return np.concatenate(parts), stable


def settled_length(n, bits=6):
    """`n` with all but its `bits` leading binary digits cleared: a length that stays put while a
    series grows by up to 1/32 of it (what "auto" smoothing looks at; see `run_traces`)."""
    drop = max(0, int(n).bit_length() - bits)
    return (int(n) >> drop) << drop
