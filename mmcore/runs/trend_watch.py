"""Each run's metrics stream followed as it grows: a short trend (the Jobs table's sparkline) and the
health findings, recomputed only when new records arrived. One `RunWatch` is shared by every
session of a dashboard process (thread-safe)."""
import threading
from dataclasses import dataclass, field

import numpy as np

from mmcore.runs import health, metric_stream
from trainer.rules.specs import RL_TYPES

TREND_POINTS = 40  # points of a sparkline: enough for a shape, few enough for a table cell


@dataclass
class RunSummary:
    trend: list = field(default_factory=list)     # reward (RL) or loss values, oldest first
    trend_name: str = ""                          # which metric the trend shows
    findings: list = field(default_factory=list)  # health.Finding, in rule order
    records: int = 0


def trend_of(df, train_type):
    """Up to TREND_POINTS values of the run's reward (RL types) or loss, evenly spread over the run."""
    names = ("reward", "loss") if train_type in RL_TYPES else ("loss", "reward")
    for name in names:
        if name in df.columns:
            values = df[name].to_numpy(dtype=float)
            values = values[np.isfinite(values)]
            if len(values) > TREND_POINTS:
                values = values[np.linspace(0, len(values) - 1, TREND_POINTS).round().astype(int)]
            return name, [round(float(v), 6) for v in values]
    return "", []


class RunWatch:
    """Incremental readers of many runs' metrics streams, keyed by run folder."""

    def __init__(self):
        self._lock = threading.Lock()
        self._readers = {}    # run dir -> MetricsReader
        self._summaries = {}  # (run dir, type, settings) -> (records read, RunSummary)

    def summary(self, run_dir, train_type, settings=None):
        """The run's trend and health findings now (an empty summary for a run without records)."""
        if run_dir is None:
            return RunSummary()
        key = str(run_dir)
        settings = settings or health.HealthSettings()
        with self._lock:
            reader = self._readers.get(key)
            if reader is None:
                reader = self._readers[key] = metric_stream.MetricsReader(run_dir)
            reader.update()
            count = len(reader)
            cached = self._summaries.get((key, train_type, settings))
            if cached is not None and cached[0] == count:
                return cached[1]
            df = reader.frame()
        name, trend = trend_of(df, train_type)
        result = RunSummary(trend, name, health.evaluate(df, settings), count)
        with self._lock:
            self._summaries = {k: v for k, v in self._summaries.items() if k[0] != key}
            self._summaries[(key, train_type, settings)] = (count, result)
        return result

    def forget(self, run_dir):
        with self._lock:
            self._readers.pop(str(run_dir), None)
            self._summaries = {k: v for k, v in self._summaries.items() if k[0] != str(run_dir)}
