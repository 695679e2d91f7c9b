"""What a live chart or log tail sends to its page component (`components/livechart.js`,
`components/livetail.js`), as plain functions.

A chart (`mmcore.logs.charts.Chart`) is sent whole once ("draw"); while the same chart is shown,
later runs send only what changed ("extend"): for each array, how many of its values the browser
keeps and the values that follow. Which values stay is the chart's `stable` count, checked against a
digest of what was sent, so anything unexpected (a resumed run replacing its tail, a new smoothing
weight) is simply sent again. When nothing changed the message is "same". Every message carries
the chain it belongs to (`epoch`, new at each draw) and its number (`seq`); an extend also says which
message it follows (`after`), so a browser that missed one, or lost its chart, asks for a draw.

Arrays travel as base64 of little-endian int32, float32 or float64, whichever holds them exactly
(float32 for the arrays the chart marks as drawn only, such as smoothed lines and band edges).

A log tail works the same way with lines: drawn whole, then extended by the lines dropped from its
top, kept, and added at its end (`tail_message`).
"""
import base64
import hashlib
import json
import secrets
from dataclasses import dataclass

import numpy as np

from mmcore.base import message_chain

_INT32 = 2 ** 31 - 1


@dataclass(frozen=True)
class Sent:
    """What one session last sent for one chart: the message chain's `epoch` and `seq`, the chart's
    `signature` (layout and trace styles), and per array (length, stable count, digest of its stable
    prefix, digest of all of it)."""
    epoch: str
    seq: int
    signature: str
    arrays: dict


def encode(values, drawn_only=False):
    """{"dtype": "i4"|"f4"|"f8", "b64": ...}: `values` as the smallest of those that holds them
    exactly (float32 when `drawn_only`: a line drawn on screen needs no more)."""
    a = np.asarray(values, dtype=np.float64)
    if drawn_only:
        dtype = "f4"
    elif np.isfinite(a).all() and (a == np.round(a)).all() and (np.abs(a) <= _INT32).all():
        dtype = "i4"
    elif np.array_equal(a.astype(np.float32).astype(np.float64), a, equal_nan=True):
        dtype = "f4"
    else:
        dtype = "f8"
    return {"dtype": dtype, "b64": base64.b64encode(a.astype("<" + dtype).tobytes()).decode("ascii")}


def decode(encoded):
    """The float64 array of an `encode`d one (what the component does in JavaScript)."""
    return np.frombuffer(base64.b64decode(encoded["b64"]), dtype="<" + encoded["dtype"]).astype(np.float64)


def _digest(values):
    return hashlib.blake2b(np.ascontiguousarray(values, dtype=np.float64).tobytes(), digest_size=16).hexdigest()


def signature(chart):
    """A digest of what a chart looks like apart from its data: its layout, its traces' styles and the
    names of its arrays."""
    text = json.dumps([chart.layout, chart.traces, sorted(chart.arrays)], sort_keys=True, default=str)
    return hashlib.blake2b(text.encode("utf-8"), digest_size=16).hexdigest()


def _record(chart):
    return {key: (len(values), chart.stable.get(key, 0), _digest(values[:chart.stable.get(key, 0)]), _digest(values))
            for key, values in chart.arrays.items()}


def chart_message(chart, sent=None):
    """(the component's data, the new `Sent`) for showing `chart` where `sent` was sent last (None:
    nothing, or the browser lost it)."""
    sign = signature(chart)
    record = _record(chart)
    if sent is None or sent.signature != sign:
        epoch = secrets.token_hex(4)
        return ({"op": "draw", "epoch": epoch, "seq": 1, "layout": chart.layout, "traces": chart.traces,
                 "arrays": {key: encode(values, key in chart.drawn_only) for key, values in chart.arrays.items()}},
                Sent(epoch, 1, sign, record))
    changes = {}
    for key, values in chart.arrays.items():
        _length, stable, stable_digest, whole = sent.arrays[key]
        if record[key][3] == whole:
            continue
        keep = stable if len(values) >= stable and _digest(values[:stable]) == stable_digest else 0
        changes[key] = {"keep": keep, "tail": encode(values[keep:], key in chart.drawn_only)}
    if not changes:
        return {"op": "same", "epoch": sent.epoch, "seq": sent.seq}, sent
    seq = sent.seq + 1
    return ({"op": "extend", "epoch": sent.epoch, "seq": seq, "after": sent.seq, "arrays": changes},
            Sent(sent.epoch, seq, sign, record))


def apply(held, data):
    """What a browser holding `held` ({"epoch", "seq", "arrays": {key: float64 array}}, or None) holds
    after `data`, or None when it cannot follow (it must ask for a draw): the component's rules, for
    tests and benches."""
    return message_chain.follow(held, data, _drawn, _extended)


def _drawn(data):
    return {"layout": data["layout"], "traces": data["traces"],
            "arrays": {key: decode(encoded) for key, encoded in data["arrays"].items()}}


def _extended(held, data):
    arrays = dict(held["arrays"])
    for key, change in data["arrays"].items():
        arrays[key] = np.concatenate([arrays[key][:change["keep"]], decode(change["tail"])])
    return {"arrays": arrays}


# -- log tails ---------------------------------------------------------------------------------------

TRIED_DROPS = 200  # where a tail's new lines start is looked for among its first lines only


@dataclass(frozen=True)
class SentTail:
    """What one session last sent for one log tail: its message chain and the lines it shows."""
    epoch: str
    seq: int
    lines: tuple


def _overlap(old, new):
    """(drop, keep): `new` is `old` without its first `drop` lines, its next `keep` lines kept and the
    rest of `new` added (the last old line may have been rewritten: a progress bar); None when `new`
    does not continue `old`."""
    if not new:
        return None
    for drop in range(min(len(old), TRIED_DROPS)):
        if old[drop] != new[0]:
            continue
        keep = 0
        for a, b in zip(old[drop:], new):
            if a != b:
                break
            keep += 1
        if keep >= len(old) - drop - 1:
            return drop, keep
    return None


def tail_message(lines, html, sent=None):
    """(the tail component's data, the new `SentTail`) for showing `lines` (`html` draws them whole)
    where `sent` was sent last (None: nothing, or the browser lost it)."""
    lines = tuple(lines)
    overlap = _overlap(sent.lines, lines) if sent is not None else None
    if overlap is None:
        epoch = secrets.token_hex(4)
        return {"op": "draw", "epoch": epoch, "seq": 1, "html": html, "count": len(lines)}, SentTail(epoch, 1, lines)
    drop, keep = overlap
    if drop == 0 and keep == len(sent.lines) == len(lines):
        return {"op": "same", "epoch": sent.epoch, "seq": sent.seq}, sent
    seq = sent.seq + 1
    return ({"op": "extend", "epoch": sent.epoch, "seq": seq, "after": sent.seq, "drop": drop, "keep": keep,
             "add": list(lines[keep:])}, SentTail(sent.epoch, seq, lines))
