"""Sustainable throughput: the step verdict, the rate search, Spark's batching per bound."""

from __future__ import annotations

import math
import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from streamscale.errors import ConfigError
from streamscale.experiment.sustainable import (
    Criteria,
    SearchPlan,
    Step,
    bracket,
    curve_latencies,
    lag_slope,
    next_rate,
    percentile,
    search,
    spark_batching,
    steady_window_s,
    verdict,
)

RATE = 10_000.0


def steady_step(
    lag: float = 2_000.0,
    growth: float = 0.0,
    latency_ms: float = 800.0,
    offered: float = RATE,
    seconds: float = 60.0,
    swing: float = 0.0,
    unanswered: int = 0,
) -> Step:
    """A step from 20 s to 20 + ``seconds``: lag sampled every 0.5 s (a sawtooth of ``swing``
    records around ``lag`` growing by ``growth``/s), 1,000 latencies around ``latency_ms``."""
    start, end = 20.0, 20.0 + seconds
    points = [
        (start + i / 2, lag + growth * i / 2 + (swing if i % 4 < 2 else -swing))
        for i in range(int(seconds * 2) + 1)
    ]
    latencies = [latency_ms * (0.5 + i / 1000) for i in range(1000)]
    return Step(RATE, start, end, points, latencies, round(offered * seconds), unanswered)


@pytest.mark.parametrize(
    ("step", "bound_s", "sustained", "reason"),
    [
        (steady_step(), 5.0, True, None),
        (steady_step(swing=1_500.0), 5.0, True, None),  # micro-batches: the lag swings
        (steady_step(growth=500.0), 30.0, False, "lag grows 500 records/s"),
        (steady_step(growth=150.0), 30.0, True, None),  # 1.5 % of the input
        (steady_step(lag=60_000.0), 5.0, False, "end lag 60,000 > 5 s of input"),
        (steady_step(lag=60_000.0), 30.0, True, None),
        (steady_step(latency_ms=4_000.0), 5.0, False, "p99 5,956 ms > 5 s"),
        (steady_step(latency_ms=3_300.0), 5.0, True, None),
        (steady_step(offered=9_000.0), 30.0, False, "the generator fell behind"),
        (steady_step(seconds=45.0), 30.0, False, "steady window 45 s < 60 s"),
        (steady_step(unanswered=3), 30.0, False, "3 inputs of the window without an output"),
    ],
)
def test_verdict(step: Step, bound_s: float, sustained: bool, reason: str | None) -> None:
    v = verdict(step, Criteria(bound_s=bound_s))
    assert v.sustained is sustained, v.reasons
    if reason is None:
        assert v.reasons == ()
    else:
        assert any(reason in r for r in v.reasons), v.reasons


def test_verdict_without_latencies_or_samples() -> None:
    step = Step(RATE, 0.0, 60.0, [(0.0, 0.0)], [], 600_000)
    v = verdict(step, Criteria(bound_s=30.0))
    assert not v.sustained
    assert "no latency sample" in v.reasons
    assert "too few lag samples in the steady window" in v.reasons


def test_verdict_ignores_samples_outside_the_window() -> None:
    step = steady_step()
    warm_up = [(t, 1e9) for t in (0.0, 5.0, 19.9)]  # a start-up backlog before the window
    late = [(200.0, 1e9)]
    moved = Step(step.rate, 20.0, 80.0, [*warm_up, *step.lag, *late], step.latencies_ms, 600_000)
    assert verdict(moved, Criteria(5.0)).sustained


@pytest.mark.parametrize(
    ("values", "q", "expected"),
    [([], 99, math.nan), ([3.0], 99, 3.0), (list(range(101)), 99, 99), ([5, 1, 3], 50, 3)],
)
def test_percentile(values: list[float], q: float, expected: float) -> None:
    got = percentile(values, q)
    assert (math.isnan(got) and math.isnan(expected)) or got == expected


@given(
    st.floats(-1e5, 1e5), st.floats(0, 1e6), st.lists(st.floats(0, 1e3), min_size=2, max_size=50)
)
def test_lag_slope_of_a_line(slope: float, intercept: float, gaps: list[float]) -> None:
    times = [0.0]
    for g in gaps:
        times.append(times[-1] + g + 0.1)
    points = [(t, intercept + slope * t) for t in times]
    assert lag_slope(points) == pytest.approx(slope, rel=1e-6, abs=1e-3)


def micro_batch_lag(
    rate: float, trigger_s: float, batch_s: tuple[float, float], seconds: float, seed: int
) -> list[tuple[float, float]]:
    """The lag, sampled every 0.5 s, of a micro-batch engine that keeps up: a batch starts
    every ``trigger_s`` with what has been appended, takes a random time within ``batch_s``
    (shorter than the trigger), and at its end the lag falls to what came meanwhile."""
    rnd = random.Random(seed)
    starts = [k * trigger_s for k in range(int(seconds / trigger_s) + 2)]
    ends = [s + rnd.uniform(*batch_s) for s in starts]
    points, t, last = [], ends[0], 0
    while t < seconds:
        while last + 1 < len(ends) and ends[last + 1] <= t:
            last += 1
        points.append((t, rate * (t - starts[last])))
        t += 0.5
    return points


def test_steady_window_spans_enough_batch_cycles_for_the_slope() -> None:
    """Spark's game sessions within 30 s (7.5 s triggers, batches of 3-5 s) keep up, yet a
    minute's window puts their lag's slope past 2 % of the rate in some windows; the window of
    :func:`steady_window_s` keeps it well within, wherever it starts."""
    rate, trigger_s = 14_142.0, 7.5
    window_s = steady_window_s(60.0, trigger_s)
    assert window_s == 180.0
    slopes: dict[float, list[float]] = {60.0: [], window_s: []}
    for seed in range(10):
        lag = micro_batch_lag(rate, trigger_s, (3.0, 5.0), 900.0, seed)
        for start in range(10, 700, 9):
            for length, found in slopes.items():
                found.append(lag_slope([(t, v) for t, v in lag if start <= t <= start + length]))
    assert max(slopes[60.0]) > 0.02 * rate
    assert max(abs(s) for s in slopes[window_s]) < 0.01 * rate


@pytest.mark.parametrize(
    ("min_steady_s", "cycle_s", "expected"),
    [
        (60.0, 0.0, 60.0),
        (60.0, 0.25, 60.0),
        (60.0, 1.25, 60.0),
        (60.0, 7.5, 180.0),
        (90.0, 2.0, 90.0),
    ],
)
def test_steady_window_s(min_steady_s: float, cycle_s: float, expected: float) -> None:
    assert steady_window_s(min_steady_s, cycle_s) == expected


@pytest.mark.parametrize(("min_steady_s", "cycle_s"), [(0.0, 1.0), (60.0, -1.0)])
def test_steady_window_s_refused(min_steady_s: float, cycle_s: float) -> None:
    with pytest.raises(ConfigError, match="steady window"):
        steady_window_s(min_steady_s, cycle_s)


def test_lag_slope_of_one_time() -> None:
    assert lag_slope([(1.0, 5.0), (1.0, 7.0)]) == 0.0


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"bound_s": 0}, "positive"),
        ({"bound_s": 5, "max_slope": 1.0}, "max_slope"),
        ({"bound_s": 5, "min_offered": 0.0}, "max_slope"),
    ],
)
def test_criteria_refused(kwargs: dict[str, float], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        Criteria(**kwargs)


# --- the search ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("history", "expected"),
    [
        ([], (None, None)),
        ([(1000, True), (2000, True)], (2000, None)),
        ([(1000, True), (2000, False), (1414, True)], (1414, 2000)),
        ([(1000, False), (500, False)], (None, 500)),
        ([(1000, True), (2000, False), (1500, False), (1200, True), (800, False)], (1200, 1500)),
    ],
)
def test_bracket(
    history: list[tuple[float, bool]], expected: tuple[float | None, float | None]
) -> None:
    assert bracket(history) == expected


PLAN = SearchPlan(start=1000.0, factor=2.0, precision=0.1, max_steps=8, floor=100.0)


@pytest.mark.parametrize(
    ("history", "expected"),
    [
        ([], 1000.0),
        ([(1000.0, True)], 2000.0),
        ([(1000.0, True), (2000.0, True)], 4000.0),
        ([(1000.0, True), (2000.0, False)], math.sqrt(2e6)),
        ([(1000.0, False)], 500.0),
        ([(1000.0, False), (500.0, False), (250.0, False), (125.0, False)], None),  # floor
        ([(1000.0, True), (1050.0, False)], None),  # within precision
        ([(1000.0, True)] * 8, None),  # budget
    ],
)
def test_next_rate(history: list[tuple[float, bool]], expected: float | None) -> None:
    got = next_rate(history, PLAN)
    assert got == (pytest.approx(expected) if expected is not None else None)


@given(
    capacity=st.floats(150.0, 1e6),
    start=st.floats(100.0, 1e5),
    factor=st.floats(1.2, 4.0),
    precision=st.floats(0.02, 0.5),
    max_steps=st.integers(1, 30),
)
def test_search_finds_a_threshold(
    capacity: float, start: float, factor: float, precision: float, max_steps: int
) -> None:
    """Against an engine that sustains exactly the rates up to ``capacity``: the answer never
    exceeds it, the steps stay within the budget, and with budget enough it is within the
    precision of it."""
    plan = SearchPlan(start, factor, precision, max_steps, floor=100.0)
    result = search(lambda rate: rate <= capacity, plan)
    assert len(result.steps) <= max_steps
    assert result.sustained <= capacity
    assert all(ok == (rate <= capacity) for rate, ok in result.steps)
    low, high = bracket(result.steps)
    done = next_rate(result.steps, plan) is None
    if low is not None and high is not None and done and len(result.steps) < max_steps:
        assert high / low <= 1 + precision
        assert result.sustained >= capacity / (1 + precision)


def test_search_with_noise_keeps_the_highest_sustained() -> None:
    answers = iter([True, False, False, True, False, False, False, False])
    result = search(lambda _: next(answers), PLAN)
    assert result.steps[0] == (1000.0, True)
    assert result.sustained == max(r for r, ok in result.steps if ok)


def test_search_goes_on_from_known_steps() -> None:
    """Steps measured for another bound count: a failure below rates already sustained
    (noise) does not send the search down, and the budget includes them."""
    known = [(1000.0, False), (2000.0, True), (4000.0, True), (8000.0, False)]
    tried: list[float] = []
    plan = SearchPlan(start=1000.0, precision=0.1, max_steps=5)
    result = search(lambda rate: tried.append(rate) or rate <= 5000, plan, known)
    assert result.steps[:4] == known
    assert tried == [math.sqrt(4000.0 * 8000.0)]  # above 5000: failed
    assert result.sustained == 4000.0
    assert search(lambda rate: True, SearchPlan(1000.0, max_steps=4), known).steps == known


def test_search_where_nothing_is_sustained() -> None:
    result = search(lambda _: False, PLAN)
    assert result.sustained == 0.0
    assert [r for r, _ in result.steps] == [1000.0, 500.0, 250.0, 125.0]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"start": 0.0}, "positive"),
        ({"start": 1.0, "factor": 1.0}, "factor"),
        ({"start": 1.0, "max_steps": 0}, "max_steps"),
    ],
)
def test_search_plan_refused(kwargs: dict[str, float], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        SearchPlan(**kwargs)  # type: ignore[arg-type]


# --- Spark's batching ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("bound_s", "rate", "trigger", "max_offsets"),
    [
        (1.0, 10_000.0, "250 milliseconds", 5_000),
        (5.0, 10_000.0, "1250 milliseconds", 25_000),
        (30.0, 20_000.0, "7500 milliseconds", 300_000),
        (5.0, 0.1, "1250 milliseconds", 1),
    ],
)
def test_spark_batching(bound_s: float, rate: float, trigger: str, max_offsets: int) -> None:
    b = spark_batching(bound_s, rate)
    assert b.trigger == {"processingTime": trigger}
    assert b.max_offsets == max_offsets


@given(st.floats(0.1, 600.0), st.floats(1.0, 1e7))
def test_spark_batching_fits_the_bound(bound_s: float, rate: float) -> None:
    b = spark_batching(bound_s, rate)
    assert b.trigger_s < bound_s
    assert b.max_offsets >= rate * b.trigger_s  # a batch can take a trigger's input


def test_spark_batching_refused() -> None:
    with pytest.raises(ConfigError):
        spark_batching(0.0, 1.0)


# --- latencies from cumulative counts ---------------------------------------------------------


def test_curve_latencies_of_a_constant_delay() -> None:
    """1,000 records/s appended from t=0, each done 2 s later (sampled every 0.1 s)."""
    appended = [(t / 10, t * 100.0) for t in range(0, 1001)]
    done = [(t / 10, max(0.0, (t / 10 - 2.0) * 1000)) for t in range(0, 1001)]
    latencies, missing = curve_latencies(appended, done, 10.0, 70.0, samples=500)
    assert missing == 0
    assert len(latencies) == 500
    assert all(2000 <= v <= 2100 + 1e-6 for v in latencies)


def test_curve_latencies_of_micro_batches() -> None:
    """Batches every 2 s finishing what arrived before them, 0.5 s after they start: the
    oldest record of a batch waits 2.5 s, the newest 0.5 s."""
    appended = [(t / 10, t * 100.0) for t in range(0, 1001)]
    done = []
    for t in range(0, 1001):
        now = t / 10
        finished = max(0.0, (now - 0.5) // 2 * 2) if now >= 0.5 else 0.0
        done.append((now, finished * 1000))
    latencies, missing = curve_latencies(appended, done, 10.0, 70.0)
    assert missing == 0
    assert percentile(latencies, 99) == pytest.approx(2500, abs=120)
    assert min(latencies) == pytest.approx(500, abs=120)


def test_curve_latencies_counts_what_is_not_done() -> None:
    appended = [(0.0, 0.0), (10.0, 1000.0)]
    done = [(0.0, 0.0), (10.0, 500.0)]
    latencies, missing = curve_latencies(appended, done, 0.0, 10.0, samples=100)
    assert missing == 50
    assert len(latencies) == 50


@pytest.mark.parametrize(
    ("appended", "done"),
    [([], [(0.0, 0.0)]), ([(0.0, 0.0), (1.0, 10.0)], []), ([(0.0, 5.0), (9.0, 5.0)], [(0.0, 5.0)])],
)
def test_curve_latencies_without_input(
    appended: list[tuple[float, float]], done: list[tuple[float, float]]
) -> None:
    assert curve_latencies(appended, done, 0.0, 10.0) == ([], 0)


@given(st.floats(0.0, 20.0), st.floats(10.0, 1e5))
def test_curve_latencies_never_below_the_delay(delay: float, rate: float) -> None:
    appended = [(t / 2, t / 2 * rate) for t in range(0, 241)]
    done = [(t / 2, max(0.0, (t / 2 - delay) * rate)) for t in range(0, 241)]
    latencies, _ = curve_latencies(appended, done, 20.0, 80.0, samples=200)
    assert all(v >= delay * 1000 - 1e-3 for v in latencies)
    assert all(v <= (delay + 0.5) * 1000 + 1e-3 for v in latencies)
