"""Sustainable throughput: the verdict on one load step and the search over rates (pure).

The definition is Karimov et al.'s ("Benchmarking Distributed Stream Data Processing
Systems", ICDE 2018): an engine *sustains* an input rate when, over a steady window of at
least a minute of input at that rate (after a warm-up), its backlog does not grow and the
p99 of its event-time latency stays within the bound. Here, precisely (:func:`verdict`):

- **offered**: the input that reached the broker during the window is at least
  ``min_offered`` (0.95) of the nominal rate; below it the step measured the generator
  (which shares the machine), not the engine, and does not count as sustained;
- **lag not growing**: the least-squares slope of the records lag (input records appended
  minus records the engine has finished, sampled over the window) is at most
  ``max_slope`` (0.02) of the input rate: a backlog growing by 2 % of the input would
  need 50 windows to reach one window's input; a lag that swings with each micro-batch
  has a slope near 0 over many batches, so the window spans at least :data:`MIN_CYCLES` of
  the engine's batch cycles (:func:`steady_window_s`);
- **end lag bounded**: the largest lag over the last ``end_window_s`` (10 s) of the window
  is at most ``rate × bound``: what is left at the end is drained within the bound at the
  input rate (so a lag that is flat but already past the bound fails);
- **latency**: the p99 of (output record's append time − its input record's append time)
  over the inputs appended during the window is within the bound, and every such input has
  its output (an input without one is a record the engine never finished).

The search (:func:`next_rate`, :func:`search`) steps the rate up geometrically from a start
until a step fails (or down, when the start fails), then bisects (geometrically) between the
highest sustained and the lowest failed rate until they are within ``precision`` of each
other or the step budget is spent. The answer is the highest sustained rate seen.

No I/O here: ``benchmarks/sustainable.py`` runs the generator and the engines and feeds the
samples in.
"""

from __future__ import annotations

import bisect
import math
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from streamscale.errors import ConfigError

LagPoint = tuple[float, float]
"""``(seconds, records lag)``: one sample of the backlog."""


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0-100) by nearest rank on the sorted values; nan when empty."""
    if not values:
        return math.nan
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1)))]


def lag_slope(points: Sequence[LagPoint]) -> float:
    """Least-squares slope of the lag over time, records/s (0 with fewer than two times)."""
    if len({t for t, _ in points}) < 2:
        return 0.0
    return statistics.linear_regression([t for t, _ in points], [v for _, v in points]).slope


MIN_CYCLES = 24
"""Batch cycles a steady window spans at least (see :func:`steady_window_s`)."""


def steady_window_s(min_steady_s: float, cycle_s: float = 0.0) -> float:
    """How long a step's steady window lasts: at least ``min_steady_s`` and
    :data:`MIN_CYCLES` of the engine's batch cycles (its trigger interval; 0 for an engine
    that does not batch).

    A micro-batch engine's lag is a sawtooth: it rises with the input between two batches'
    ends and falls at each, to the input of the batch that just ran, which varies with that
    batch's length. Over a minute of 7.5 s triggers (8 teeth) those swings alone move the
    least-squares slope by more than 2 % of the rate: on 2026-12-07, Spark's game sessions
    failed 14,142 and 20,000 records/s within 30 s on the slope alone (+684 and +902/s)
    while every batch ended within 3.6-4.5 s of its 7.5 s trigger. Over 24 cycles the
    slope's spread from that noise falls to a fraction of the 2 % (unit-tested on a
    simulated micro-batch lag), and a minute stays the floor (Karimov et al.).
    """
    if not (min_steady_s > 0 and cycle_s >= 0):
        raise ConfigError("the steady window must be positive and the batch cycle not negative")
    return max(min_steady_s, MIN_CYCLES * cycle_s)


@dataclass(frozen=True)
class Criteria:
    """What a step must show to count as sustained (see the module's docstring)."""

    bound_s: float
    min_steady_s: float = 60.0
    max_slope: float = 0.02
    end_window_s: float = 10.0
    min_offered: float = 0.95
    quantile: float = 99.0

    def __post_init__(self) -> None:
        if not (self.bound_s > 0 and self.min_steady_s > 0 and self.end_window_s > 0):
            raise ConfigError("the latency bound and the windows must be positive seconds")
        if not (0 <= self.max_slope < 1 and 0 < self.min_offered <= 1):
            raise ConfigError("max_slope must be within [0, 1) and min_offered within (0, 1]")


@dataclass(frozen=True)
class Step:
    """What one step at a nominal ``rate`` measured over its steady window.

    ``lag``: ``(seconds, records lag)`` samples, ``steady_start_s`` and ``steady_end_s`` on
    the same clock (samples outside the window are ignored); ``latencies_ms``: one per input
    record appended during the window that has its output; ``unanswered``: inputs of the
    window without an output; ``offered``: input records appended during the window.
    """

    rate: float
    steady_start_s: float
    steady_end_s: float
    lag: Sequence[LagPoint]
    latencies_ms: Sequence[float]
    offered: int
    unanswered: int = 0

    @property
    def steady_s(self) -> float:
        return self.steady_end_s - self.steady_start_s

    def window(self) -> list[LagPoint]:
        """The lag samples within the steady window, by time."""
        return sorted((t, v) for t, v in self.lag if self.steady_start_s <= t <= self.steady_end_s)


@dataclass(frozen=True)
class Verdict:
    """The verdict on one step, with the figures it was read from and why it failed."""

    sustained: bool
    rate: float
    offered_rate: float
    slope: float
    end_lag: float
    p99_ms: float
    reasons: tuple[str, ...] = ()


def verdict(step: Step, criteria: Criteria) -> Verdict:
    """Whether ``step`` sustained its rate under ``criteria`` (all of them hold)."""
    reasons: list[str] = []
    window = step.window()
    steady = step.steady_s
    offered_rate = step.offered / steady if steady > 0 else 0.0
    slope = lag_slope(window)
    tail = [v for t, v in window if t >= step.steady_end_s - criteria.end_window_s]
    end_lag = max(tail) if tail else math.nan
    p99 = percentile(step.latencies_ms, criteria.quantile)
    if steady < criteria.min_steady_s:
        reasons.append(f"steady window {steady:.0f} s < {criteria.min_steady_s:.0f} s")
    if len(window) < 2 or not tail:
        reasons.append("too few lag samples in the steady window")
    if offered_rate < criteria.min_offered * step.rate:
        reasons.append(
            f"offered {offered_rate:,.0f}/s < {criteria.min_offered:.0%} of {step.rate:,.0f}/s "
            "(the generator fell behind)"
        )
    if slope > criteria.max_slope * step.rate:
        reasons.append(
            f"lag grows {slope:,.0f} records/s > {criteria.max_slope:.0%} of the input rate"
        )
    if tail and end_lag > step.rate * criteria.bound_s:
        reasons.append(f"end lag {end_lag:,.0f} > {criteria.bound_s:g} s of input")
    if step.unanswered:
        reasons.append(f"{step.unanswered:,} inputs of the window without an output")
    if math.isnan(p99):
        reasons.append("no latency sample")
    elif p99 > criteria.bound_s * 1000:
        reasons.append(f"p{criteria.quantile:g} {p99:,.0f} ms > {criteria.bound_s:g} s")
    return Verdict(
        sustained=not reasons,
        rate=step.rate,
        offered_rate=offered_rate,
        slope=slope,
        end_lag=end_lag,
        p99_ms=p99,
        reasons=tuple(reasons),
    )


def _interpolate(x: float, xs: Sequence[float], ys: Sequence[float], i: int) -> float:
    """``ys`` at ``x`` on the piecewise-linear curve through ``(xs, ys)``, ``i`` being
    where ``x`` falls in ``xs`` (a bisection); the end values outside the curve."""
    if i == 0:
        return ys[0]
    if i == len(xs):
        return ys[-1]
    x0, x1, y0, y1 = xs[i - 1], xs[i], ys[i - 1], ys[i]
    return y0 + (y1 - y0) * (x - x0) / (x1 - x0) if x1 > x0 else y1


def curve_latencies(
    appended: Sequence[LagPoint],
    done: Sequence[LagPoint],
    start_s: float,
    end_s: float,
    samples: int = 1000,
) -> tuple[list[float], int]:
    """Latencies (ms) read from two cumulative counts, for an engine whose output does not
    name its inputs one by one (game sessions: a session sums frames).

    ``appended``: ``(seconds, records appended so far)``; ``done``: ``(seconds, records the
    engine has finished so far)``, both sorted by time. Records are taken in order (first in,
    first done): record ``k`` is appended when ``appended`` reaches ``k`` (interpolated
    between samples) and done at the first ``done`` sample that reaches ``k`` (so up to one
    sampling interval late). ``samples`` records spread evenly over those appended within
    ``[start_s, end_s]``; returns their latencies and how many of them are not done by the
    last ``done`` sample."""
    if len(appended) < 2 or not done or samples < 1:
        return [], 0
    times = [t for t, _ in appended]
    counts = [c for _, c in appended]

    def count_at(t: float) -> float:
        return _interpolate(t, times, counts, bisect.bisect_right(times, t))

    def time_of(k: float) -> float:
        return _interpolate(k, counts, times, bisect.bisect_left(counts, k))

    first, last = count_at(start_s), count_at(end_s)
    if last <= first:
        return [], 0
    done_counts = [c for _, c in done]
    latencies: list[float] = []
    missing = 0
    for j in range(samples):
        k = first + (last - first) * (j + 0.5) / samples
        i = bisect.bisect_left(done_counts, k)
        if i == len(done_counts):
            missing += 1
            continue
        latencies.append(max(0.0, done[i][0] - time_of(k)) * 1000)
    return latencies, missing


# --- the search ------------------------------------------------------------------------------


@dataclass(frozen=True)
class SearchPlan:
    """How the rate is stepped: from ``start``, ×``factor`` up (÷ down while the start fails),
    then geometric bisection until ``high / low <= 1 + precision``; at most ``max_steps``
    steps, never below ``floor``."""

    start: float
    factor: float = 2.0
    precision: float = 0.1
    max_steps: int = 8
    floor: float = 100.0

    def __post_init__(self) -> None:
        if not (self.start > 0 and self.factor > 1 and self.precision > 0 and self.floor > 0):
            raise ConfigError("start and floor must be positive, factor > 1, precision > 0")
        if self.max_steps < 1:
            raise ConfigError("max_steps must be at least 1")


def bracket(history: Sequence[tuple[float, bool]]) -> tuple[float | None, float | None]:
    """The highest sustained rate and the lowest failed rate above it (None when absent).

    A failed rate below the highest sustained one (noise) does not bound the search."""
    ok = [r for r, s in history if s]
    low = max(ok) if ok else None
    failed = [r for r, s in history if not s and (low is None or r > low)]
    return low, (min(failed) if failed else None)


def next_rate(history: Sequence[tuple[float, bool]], plan: SearchPlan) -> float | None:
    """The next rate to try after ``history`` (``(rate, sustained)`` in the order tried), or
    None when the search is over (bracket narrow enough, budget spent, or below the floor)."""
    if len(history) >= plan.max_steps:
        return None
    if not history:
        return plan.start
    low, high = bracket(history)
    if low is None:
        assert high is not None
        rate = high / plan.factor
        return rate if rate >= plan.floor else None
    if high is None:
        return low * plan.factor
    if high / low <= 1 + plan.precision:
        return None
    return math.sqrt(low * high)


@dataclass
class SearchResult:
    """The steps tried, in order, and the highest sustained rate (0 when none was)."""

    steps: list[tuple[float, bool]] = field(default_factory=list)

    @property
    def sustained(self) -> float:
        low, _ = bracket(self.steps)
        return low or 0.0


def search(
    sustained: Callable[[float], bool],
    plan: SearchPlan,
    known: Sequence[tuple[float, bool]] = (),
) -> SearchResult:
    """Run the search, calling ``sustained(rate)`` once per step (at most ``max_steps``, the
    ``known`` steps included).

    ``known``: steps already measured that serve this search too (an engine whose one
    measurement of a rate is judged against every bound): the search goes on from them, so
    a step that failed for a passing reason (a backlog left from the warm-up) below rates
    already sustained does not send it down."""
    result = SearchResult(list(known))
    while (rate := next_rate(result.steps, plan)) is not None:
        result.steps.append((rate, sustained(rate)))
    return result


# --- Spark's trigger and batch limit for a bound ---------------------------------------------

TRIGGER_SHARE = 0.25
"""Spark's trigger interval as a share of the latency bound (see :func:`spark_batching`)."""
BATCH_HEADROOM = 2.0
"""``maxOffsetsPerTrigger`` as this many triggers' worth of input at the expected rate."""


@dataclass(frozen=True)
class SparkBatching:
    """A processing-time trigger and a per-batch record limit (``maxOffsetsPerTrigger``)."""

    trigger_s: float
    max_offsets: int

    @property
    def trigger(self) -> dict[str, str]:
        """``DataStreamWriter.trigger`` arguments."""
        return {"processingTime": f"{round(self.trigger_s * 1000)} milliseconds"}


def spark_batching(bound_s: float, rate: float) -> SparkBatching:
    """How a user sizes Spark's micro-batches for a latency bound and an expected input rate.

    A record waits for the next trigger, then for its batch: to stay within the bound, the
    trigger is a quarter of it (1 s → 250 ms, 5 s → 1.25 s, 30 s → 7.5 s), which leaves
    three quarters for the batch and its jitter. The batch limit is two triggers' worth of
    input at the expected rate: a batch that ran late can catch up in the next one, and one
    batch cannot swallow a backlog and take far longer than the bound. Nothing else is tuned
    per engine or per step.
    """
    if not (bound_s > 0 and rate > 0):
        raise ConfigError("the bound and the rate must be positive")
    trigger_s = bound_s * TRIGGER_SHARE
    return SparkBatching(trigger_s, max(1, math.ceil(rate * trigger_s * BATCH_HEADROOM)))
