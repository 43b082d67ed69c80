"""One run of the experiment in figures that compare scalers, and runs side by side (pure).

``benchmarks/dynamic_allocation.py`` runs the demo's experiment (the same query, load and
cluster) once with streamscale's autoscaler and once with Spark's dynamic allocation; both
runs are measured here by one rule, from what both have:

- the timeline (:class:`~streamscale.experiment.report.TimelinePoint`, one a second): the
  time lag of the project's lag model (:mod:`streamscale.lag.model`), its seconds above the
  objective (:data:`OBJECTIVE_S`, the time lag ``rate`` keeps within), and its seconds
  without lag data (never counted as within the objective, nor as past it);
- the executors as Spark's status store lists them (:class:`ExecutorSpan`: added, removed):
  executor-seconds over the run's window, and rescales (changes of the executor count);
- the state placement sampled during the run (:class:`PlacementSample`: which executor ran
  each state partition's last task): the partitions that moved to another executor (each
  one reloaded there from the checkpoint), and those the removed executors held.

Times are seconds on the run's axis (since the command started), as the timeline's.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from streamscale.autoscale.policy import PolicyConfig
from streamscale.experiment.report import TimelinePoint

OBJECTIVE_S = PolicyConfig().urgent_time_lag_s
"""The objective on time lag (30 s): ``rate``'s urgent backlog, the simulator's SLO."""

BUCKET_S = 10.0
"""Width of the buckets of the time lag over time."""


@dataclass(frozen=True)
class ExecutorSpan:
    """One executor of the application: when it was added and removed (None: still running)."""

    id: str
    added_s: float
    removed_s: float | None = None


@dataclass(frozen=True)
class PlacementSample:
    """Which executor ran each state partition's task in the newest stateful stage, at ``t``."""

    t: float
    placement: Mapping[int, str]


@dataclass(frozen=True)
class RunFigures:
    """What one run did over its window ``[start_s, end_s]``."""

    window_s: float
    max_time_lag_s: float | None
    violation_s: float
    """Seconds with the time lag above the objective."""
    unknown_lag_s: float
    """Seconds without lag data (no sample, or one older than the timeline's age limit)."""
    executor_s: float
    rescales: int
    max_executors: int
    state_moved: int
    """State partitions that changed executor from one placement sample to the next."""
    state_on_removed: int
    """State partitions the executors removed within the window held when they went."""
    placement_samples: int
    """Samples of the state placement within the window (0: state moves not measured)."""
    time_lag_buckets: tuple[float | None, ...]
    """Highest time lag in each :data:`BUCKET_S` from ``start_s`` (None: no lag data)."""

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready, seconds rounded to the millisecond."""
        out = {k: round(v, 3) if isinstance(v, float) else v for k, v in asdict(self).items()}
        out["time_lag_buckets"] = [
            None if v is None else round(v, 3) for v in self.time_lag_buckets
        ]
        return out


def executor_seconds(spans: Iterable[ExecutorSpan], start_s: float, end_s: float) -> float:
    """Seconds each executor ran within ``[start_s, end_s]``, summed."""
    total = 0.0
    for span in spans:
        removed = end_s if span.removed_s is None else min(span.removed_s, end_s)
        total += max(0.0, removed - max(span.added_s, start_s))
    return total


def executor_counts(spans: Iterable[ExecutorSpan]) -> list[tuple[float, int]]:
    """The executor count as a step function: ``(t, count from t on)``, one entry per time
    the count changed (executors added and removed at the same time net out)."""
    deltas: dict[float, int] = {}
    for span in spans:
        deltas[span.added_s] = deltas.get(span.added_s, 0) + 1
        if span.removed_s is not None:
            deltas[span.removed_s] = deltas.get(span.removed_s, 0) - 1
    steps: list[tuple[float, int]] = []
    count = 0
    for t in sorted(deltas):
        if deltas[t]:
            count += deltas[t]
            steps.append((t, count))
    return steps


def count_at(steps: Sequence[tuple[float, int]], t: float) -> int:
    """The count of :func:`executor_counts` at ``t`` (0 before the first step)."""
    count = 0
    for when, value in steps:
        if when > t:
            break
        count = value
    return count


def rescales(spans: Iterable[ExecutorSpan], start_s: float, end_s: float) -> int:
    """Changes of the executor count within ``(start_s, end_s]`` from one running count to
    another: the application's first executor registering (from 0) is its start, not a
    rescale, and losing the last one (to 0) is a loss."""
    steps = executor_counts(spans)
    return sum(
        1
        for (_, before), (t, after) in zip([(0.0, 0), *steps], steps, strict=False)
        if start_s < t <= end_s and before > 0 and after > 0
    )


def max_executors(spans: Iterable[ExecutorSpan], start_s: float, end_s: float) -> int:
    """The highest executor count within ``[start_s, end_s]``."""
    steps = executor_counts(spans)
    within = [n for t, n in steps if start_s < t <= end_s]
    return max([count_at(steps, start_s), *within])


def _spans(points: Sequence[TimelinePoint], end_s: float) -> Iterable[tuple[TimelinePoint, float]]:
    """Each point with the seconds it stands for: until the next point (or ``end_s``)."""
    for i, p in enumerate(points):
        until = points[i + 1].t if i + 1 < len(points) else end_s
        yield p, max(0.0, min(until, end_s) - p.t)


def _within(points: Sequence[TimelinePoint], start_s: float, end_s: float) -> list[TimelinePoint]:
    return sorted((p for p in points if start_s <= p.t <= end_s), key=lambda p: p.t)


def violation_seconds(
    points: Sequence[TimelinePoint],
    start_s: float,
    end_s: float,
    objective_s: float = OBJECTIVE_S,
) -> float:
    """Seconds within ``[start_s, end_s]`` whose time lag is above ``objective_s``: each point
    stands for the time until the next one."""
    return sum(
        dt
        for p, dt in _spans(_within(points, start_s, end_s), end_s)
        if p.max_time_lag_s is not None and p.max_time_lag_s > objective_s
    )


def unknown_lag_seconds(points: Sequence[TimelinePoint], start_s: float, end_s: float) -> float:
    """Seconds within ``[start_s, end_s]`` whose points have no lag data."""
    return sum(dt for p, dt in _spans(_within(points, start_s, end_s), end_s) if not p.has_lag)


def time_lag_buckets(
    points: Sequence[TimelinePoint], start_s: float, end_s: float, width_s: float = BUCKET_S
) -> tuple[float | None, ...]:
    """The highest time lag in each ``width_s`` from ``start_s`` to ``end_s`` (None: no lag
    data in that bucket)."""
    n = max(0, math.ceil((end_s - start_s) / width_s))
    highest: list[float | None] = [None] * n
    for p in _within(points, start_s, end_s):
        if p.max_time_lag_s is None or n == 0:
            continue
        i = min(n - 1, int((p.t - start_s) // width_s))
        known = highest[i]
        highest[i] = p.max_time_lag_s if known is None else max(known, p.max_time_lag_s)
    return tuple(highest)


def state_moved(samples: Sequence[PlacementSample]) -> int:
    """State partitions whose executor changed from one sample to the next (a partition
    absent from a sample keeps its last known executor)."""
    known: dict[int, str] = {}
    moves = 0
    for sample in sorted(samples, key=lambda s: s.t):
        for partition, executor in sample.placement.items():
            before = known.get(partition)
            if before is not None and before != executor:
                moves += 1
            known[partition] = executor
    return moves


def state_on_removed(
    samples: Sequence[PlacementSample],
    spans: Iterable[ExecutorSpan],
    start_s: float,
    end_s: float,
) -> int:
    """State partitions held by the executors removed within ``(start_s, end_s]``, as the
    last sample before each removal placed them."""
    ordered = sorted(samples, key=lambda s: s.t)
    total = 0
    for span in spans:
        if span.removed_s is None or not start_s < span.removed_s <= end_s:
            continue
        before = [s for s in ordered if s.t < span.removed_s]
        if before:
            total += sum(1 for e in before[-1].placement.values() if e == span.id)
    return total


def figures(
    points: Sequence[TimelinePoint],
    spans: Sequence[ExecutorSpan],
    samples: Sequence[PlacementSample],
    start_s: float,
    end_s: float,
    objective_s: float = OBJECTIVE_S,
) -> RunFigures:
    """Every figure of one run over its window ``[start_s, end_s]``."""
    within = _within(points, start_s, end_s)
    lags = [p.max_time_lag_s for p in within if p.max_time_lag_s is not None]
    placed = [s for s in samples if start_s <= s.t <= end_s]
    return RunFigures(
        window_s=end_s - start_s,
        max_time_lag_s=max(lags) if lags else None,
        violation_s=violation_seconds(points, start_s, end_s, objective_s),
        unknown_lag_s=unknown_lag_seconds(points, start_s, end_s),
        executor_s=executor_seconds(spans, start_s, end_s),
        rescales=rescales(spans, start_s, end_s),
        max_executors=max_executors(spans, start_s, end_s),
        state_moved=state_moved(placed),
        state_on_removed=state_on_removed(samples, spans, start_s, end_s),
        placement_samples=len(placed),
        time_lag_buckets=time_lag_buckets(points, start_s, end_s),
    )


# --- runs side by side ---------------------------------------------------------------------

NUMBERS = (
    ("max_time_lag_s", "max time lag (s)", "{:.1f}"),
    ("violation_s", f"seconds above the {OBJECTIVE_S:.0f} s objective", "{:.0f}"),
    ("unknown_lag_s", "seconds without lag data", "{:.0f}"),
    ("executor_s", "executor-seconds", "{:,.0f}"),
    ("rescales", "rescales (executor count changes)", "{:g}"),
    ("max_executors", "executors at most", "{:g}"),
    ("state_moved", "state partitions moved", "{:g}"),
    ("state_on_removed", "state partitions on removed executors", "{:g}"),
    ("drain_time_s", "drain time after the peak (s)", "{:.0f}"),
)
"""The table's numeric rows: key of a run's figures, label, format of its median."""


def median(values: Iterable[float | int | None]) -> float | None:
    """The median of the known values (None when none is)."""
    known = [float(v) for v in values if v is not None]
    return statistics.median(known) if known else None


def medians(runs: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The median of every numeric row over ``runs``; ``verified`` as ``k/n``; the time lag
    buckets bucket by bucket."""
    out: dict[str, Any] = {key: median(r.get(key) for r in runs) for key, _, _ in NUMBERS}
    out["verified"] = f"{sum(1 for r in runs if r.get('verified') is True)}/{len(runs)}"
    width = max((len(r.get("time_lag_buckets") or ()) for r in runs), default=0)
    out["time_lag_buckets"] = [
        median(
            (r["time_lag_buckets"][i] if i < len(r.get("time_lag_buckets") or ()) else None)
            for r in runs
        )
        for i in range(width)
    ]
    return out


def _cell(value: Any, fmt: str) -> str:
    if value is None:
        return "–"
    if isinstance(value, str):
        return value
    return fmt.format(value)


def table(columns: Mapping[str, Mapping[str, Any]], runs: int) -> str:
    """A markdown table, one column per scaler (``columns``: name → :func:`medians`)."""
    names = list(columns)
    what = f"median of {runs} runs" if runs > 1 else "one run"
    lines = [
        f"| {what} | " + " | ".join(names) + " |",
        "|---|" + "---:|" * len(names),
    ]
    for key, label, fmt in NUMBERS:
        cells = [_cell(columns[n].get(key), fmt) for n in names]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    lines.append("| output verified | " + " | ".join(columns[n]["verified"] for n in names) + " |")
    return "\n".join(lines)


def lag_over_time(columns: Mapping[str, Mapping[str, Any]], width_s: float = BUCKET_S) -> str:
    """The time lag over time, one row per bucket, one column per scaler (highest in the
    bucket, ``–`` where no lag data)."""
    names = list(columns)
    rows = max((len(columns[n]["time_lag_buckets"]) for n in names), default=0)
    lines = [
        "| from s | " + " | ".join(f"{n} (s)" for n in names) + " |",
        "|---:|" + "---:|" * len(names),
    ]
    for i in range(rows):
        cells = []
        for n in names:
            buckets = columns[n]["time_lag_buckets"]
            cells.append(_cell(buckets[i] if i < len(buckets) else None, "{:.1f}"))
        lines.append(f"| {i * width_s:.0f} | " + " | ".join(cells) + " |")
    return "\n".join(lines)
