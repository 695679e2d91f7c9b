"""A sweep's parallel-coordinates chart: one axis per parameter that varies, the chosen metric last, one line
per run (plotly's `go.Parcoords`), coloured by the metric."""
import math

import plotly.graph_objects as go

from mmcore.experiments import runtable


def _axis(label, texts):
    """A dimension of the chart: numbers as numbers; anything else as categories in order of appearance."""
    numbers = []
    for text in texts:
        try:
            numbers.append(float(text))
        except (TypeError, ValueError):
            break
    if len(numbers) == len(texts) and all(math.isfinite(n) for n in numbers):
        return {"label": label, "values": numbers}
    categories = list(dict.fromkeys(str(t) for t in texts))
    return {"label": label, "values": [categories.index(str(t)) for t in texts],
            "tickvals": list(range(len(categories))), "ticktext": categories}


def parcoords(runs, metric):
    """The chart of `runs` (dicts as `runtable.run_of` gives them): the parameters that differ -> `metric`.
    Runs without a finite value of the metric are drawn at the metric axis' bottom (NaN would hide the line)."""
    params = [p for p in runtable.varying(runs) if p not in ("save_weight", "lora_name")]
    values = [r["results"].get(metric) for r in runs]
    finite = [v for v in values if isinstance(v, (int, float)) and math.isfinite(v)]
    floor = min(finite) if finite else 0.0
    scores = [v if isinstance(v, (int, float)) and math.isfinite(v) else floor for v in values]
    dimensions = [_axis(p, [r["params"].get(p, "") for r in runs]) for p in params]
    dimensions.append({"label": metric, "values": scores})
    line = {"color": scores, "colorscale": "Viridis", "showscale": True}
    figure = go.Figure(go.Parcoords(line=line, dimensions=dimensions))
    figure.update_layout(height=380, margin={"l": 60, "r": 60, "t": 50, "b": 30})
    return figure
