"""The lag model: table-driven cases and properties (hypothesis)."""

from __future__ import annotations

import itertools
import math

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from streamscale.lag.model import (
    BatchStats,
    LagTracker,
    OffsetPoint,
    PartitionHistory,
    PartitionOffsets,
    ProgressSample,
    growth_rate,
    merge_offsets,
    offset_time,
    records_lag,
    step_rate,
    time_lag_seconds,
    value_at,
)


@pytest.mark.parametrize(
    ("end", "processed", "lag"),
    [(10, 4, 6), (10, 10, 0), (4, 10, 0), (0, 0, 0), (2**62, 0, 2**62)],
)
def test_records_lag(end: int, processed: int, lag: int) -> None:
    assert records_lag(end, processed) == lag


HISTORY = [(100.0, 0), (110.0, 100), (120.0, 100), (130.0, 300)]


@pytest.mark.parametrize(
    ("offset", "expected"),
    [
        (0, 100.0),  # first point exactly
        (50, 105.0),  # interpolated in the first segment
        (100, 110.0),  # a flat run: the first time it was reached
        (200, 125.0),  # after the flat run
        (300, 130.0),  # the newest point
        (301, None),  # never reached
    ],
)
def test_offset_time(offset: int, expected: float | None) -> None:
    assert offset_time(HISTORY, offset) == expected


def test_offset_time_extrapolates_before_history() -> None:
    # mean slope of the history: 100 records/s from t=10 → offset 0 was at t=0
    points = [(10.0, 1000), (20.0, 2000)]
    assert offset_time(points, 0) == pytest.approx(0.0)
    assert offset_time(points, 500) == pytest.approx(5.0)


@pytest.mark.parametrize(
    "points",
    [[(10.0, 1000)], [(10.0, 1000), (20.0, 1000)]],
    ids=["one point", "no growth"],
)
def test_offset_time_without_slope_is_a_lower_bound(points: list[tuple[float, int]]) -> None:
    assert offset_time(points, 10) == 10.0


@pytest.mark.parametrize(
    ("processed", "now", "expected"),
    [
        (300, 200.0, 0.0),  # caught up
        (400, 200.0, 0.0),  # beyond the end (stale end): caught up
        (200, 130.0, 5.0),
        (200, 140.0, 15.0),  # grows with time while nothing is processed
        (0, 130.0, 30.0),
    ],
)
def test_time_lag(processed: int, now: float, expected: float) -> None:
    assert time_lag_seconds(HISTORY, processed, now) == pytest.approx(expected)


def test_time_lag_empty_history() -> None:
    assert time_lag_seconds([], 5, 100.0) == 0.0


@pytest.mark.parametrize(
    ("window", "expected"),
    [(10.0, 20.0), (20.0, 10.0), (30.0, 10.0), (1000.0, 10.0), (5.0, 20.0), (0.0, 0.0)],
)
def test_growth_rate(window: float, expected: float) -> None:
    assert growth_rate(HISTORY, window) == pytest.approx(expected)


def test_growth_rate_short_history() -> None:
    assert growth_rate([], 10) == 0.0
    assert growth_rate([(1.0, 5)], 10) == 0.0


def test_value_at() -> None:
    assert value_at(HISTORY, 0.0) == 0
    assert value_at(HISTORY, 105.0) == 50
    assert value_at(HISTORY, 1000.0) == 300
    with pytest.raises(ValueError):
        value_at([], 1.0)


# ---------------------------------------------------------------------------- properties
offsets = st.integers(min_value=0, max_value=10**12)
increments = st.lists(st.integers(min_value=0, max_value=10**6), min_size=1, max_size=30)
steps = st.lists(
    st.floats(min_value=0.001, max_value=1000, allow_nan=False), min_size=1, max_size=30
)


def _history(start: int, incs: list[int], dts: list[float]) -> list[tuple[float, int]]:
    t, v = 1_000_000.0, start
    points = [(t, v)]
    for inc, dt in zip(incs, dts, strict=False):
        t, v = t + dt, v + inc
        points.append((t, v))
    return points


@given(end=offsets, processed=offsets)
def test_records_lag_never_negative(end: int, processed: int) -> None:
    assert records_lag(end, processed) >= 0
    assert records_lag(end, processed) == (end - processed if end > processed else 0)


@given(
    start=offsets, incs=increments, dts=steps, extra=st.integers(0, 10**6), now=st.floats(0, 1e4)
)
def test_time_lag_zero_when_caught_up(
    start: int, incs: list[int], dts: list[float], extra: int, now: float
) -> None:
    points = _history(start, incs, dts)
    assert time_lag_seconds(points, points[-1][1] + extra, points[-1][0] + now) == 0.0


@given(
    start=st.integers(0, 10**9),
    rate=st.integers(1, 10**5),
    n=st.integers(2, 40),
    dt=st.floats(0.01, 100),
    frac=st.floats(-3, 1),
)
def test_interpolation_exact_on_linear_history(
    start: int, rate: int, n: int, dt: float, frac: float
) -> None:
    """On a linear history, the time an offset was reached is exact (also extrapolated)."""
    points = [(1000.0 + i * dt, start + i * rate) for i in range(n)]
    target = start + round(frac * (n - 1) * rate)
    assume(target >= 0)
    expected = 1000.0 + (target - start) / rate * dt
    assert offset_time(points, target) == pytest.approx(expected, rel=1e-9, abs=1e-6)
    now = points[-1][0] + 5.0
    lag = time_lag_seconds(points, target, now)
    if target >= points[-1][1]:
        assert lag == 0.0
    else:
        assert lag == pytest.approx(now - expected, rel=1e-9, abs=1e-6)


@given(start=offsets, incs=increments, dts=steps, a=st.integers(0, 10**7), b=st.integers(0, 10**7))
def test_time_lag_monotonic_in_processed(
    start: int, incs: list[int], dts: list[float], a: int, b: int
) -> None:
    """Processing more never increases the time lag."""
    points = _history(start, incs, dts)
    now = points[-1][0] + 1.0
    lo, hi = sorted((start + a, start + b))
    assert time_lag_seconds(points, hi, now) <= time_lag_seconds(points, lo, now) + 1e-9


@given(start=offsets, incs=increments, dts=steps, p=st.integers(0, 10**7), wait=st.floats(0, 1e4))
def test_time_lag_monotonic_in_time(
    start: int, incs: list[int], dts: list[float], p: int, wait: float
) -> None:
    """While nothing is processed, the time lag only grows, by exactly the time waited."""
    points = _history(start, incs, dts)
    now = points[-1][0]
    before = time_lag_seconds(points, start + p, now)
    after = time_lag_seconds(points, start + p, now + wait)
    assert after >= before
    if before > 0:
        assert after - before == pytest.approx(wait, abs=1e-6)


@given(start=offsets, incs=increments, dts=steps, window=st.floats(0.1, 1e4))
def test_growth_rate_bounds(start: int, incs: list[int], dts: list[float], window: float) -> None:
    points = _history(start, incs, dts)
    rate = growth_rate(points, window)
    assert rate >= 0
    span = points[-1][0] - points[0][0]
    if window >= span and span > 0:
        assert rate == pytest.approx((points[-1][1] - points[0][1]) / span)


# ----------------------------------------------------------------------------- history
def test_history_compresses_flat_runs_keeping_first_time() -> None:
    h = PartitionHistory(max_points=8)
    for t in range(10):
        h.add(OffsetPoint(float(t), 100, 100))
    assert [p.wall_time for p in h.points] == [0.0, 9.0]
    h.add(OffsetPoint(10.0, 150, 100))
    assert offset_time(h.end_points(), 100) == 0.0


def test_history_bounded_ignores_old_and_resets_backwards() -> None:
    h = PartitionHistory(max_points=3)
    for t in range(10):
        h.add(OffsetPoint(float(t), t * 10, t))
    assert len(h) == 3
    assert h.latest == OffsetPoint(9.0, 90, 9)
    h.add(OffsetPoint(5.0, 1000, 1000))  # out of order: ignored
    assert h.latest == OffsetPoint(9.0, 90, 9)
    h.add(OffsetPoint(10.0, 5, 0))  # topic re-created
    assert h.points == (OffsetPoint(10.0, 5, 0),)
    h.add(OffsetPoint(10.0, 7, 1))  # same time: replaced
    assert h.points == (OffsetPoint(10.0, 7, 1),)
    with pytest.raises(ValueError):
        PartitionHistory(max_points=1)


@given(
    st.lists(
        st.tuples(st.floats(0, 1e6), st.integers(0, 10**6), st.integers(0, 10**6)), max_size=60
    )
)
def test_history_stays_sorted_and_monotonic(raw: list[tuple[float, int, int]]) -> None:
    h = PartitionHistory(max_points=16)
    for t, e, p in raw:
        h.add(OffsetPoint(t, e, p))
    pts = h.points
    assert len(pts) <= 16
    for a, b in itertools.pairwise(pts):
        assert a.wall_time < b.wall_time
        assert a.end_offset <= b.end_offset
        assert a.processed_offset <= b.processed_offset


# ----------------------------------------------------------------------------- tracker
def _sample(
    t: float, parts: dict[tuple[str, int], tuple[int, int]], batch: int | None = None
) -> ProgressSample:
    stats = None
    if batch is not None:
        stats = BatchStats(batch, t + 0.5, records=100, busy_s=0.5, process_s=0.4)
    partitions = tuple(PartitionOffsets(tp[0], tp[1], e, p) for tp, (e, p) in parts.items())
    return ProgressSample("q", t, partitions, stats)


def test_tracker_snapshot() -> None:
    tracker = LagTracker(rate_window_s=10.0, duration_buckets=(0.25, 1.0))
    assert tracker.snapshot("q", 0.0) is None
    tracker.ingest(_sample(100.0, {("a", 0): (1000, 0), ("a", 1): (500, 500)}, batch=0))
    tracker.ingest(_sample(110.0, {("a", 0): (2000, 1000), ("a", 1): (600, 600)}, batch=1))
    snap = tracker.snapshot("q", 112.0)
    assert snap is not None
    assert snap.age_s == pytest.approx(2.0)
    assert snap.total_lag == 1000
    assert snap.lag_by_topic() == {"a": 1000}
    assert [(p.partition, p.records_lag) for p in snap.partitions] == [(0, 1000), (1, 0)]
    # offset 1000 was the end at t=100 → 12 s behind at t=112
    assert snap.partitions[0].time_lag_s == pytest.approx(12.0)
    assert snap.partitions[1].time_lag_s == 0.0
    assert snap.max_time_lag_s == pytest.approx(12.0)
    assert snap.input_rate == pytest.approx(100.0 + 10.0)
    assert snap.processed_rate == pytest.approx(100.0 + 10.0)
    assert snap.recent_capacity() == [(100, 0.5), (100, 0.5)]
    assert snap.batch_durations.count == 2
    assert snap.batch_durations.buckets == ((0.25, 0), (1.0, 2), (math.inf, 2))
    assert tracker.queries() == ["q"]
    assert [s.query for s in tracker.snapshots(112.0)] == ["q"]


def test_tracker_recent_input_rate_shows_a_step_before_the_long_average() -> None:
    tracker = LagTracker(rate_window_s=30.0, recent_window_s=10.0)
    for t in range(0, 31, 5):  # 100 records/s for 20 s, then 1 000 records/s
        end = 100 * t if t <= 20 else 2_000 + 1_000 * (t - 20)
        tracker.ingest(_sample(float(t), {("a", 0): (end, end)}))
    snap = tracker.snapshot("q", 30.0)
    assert snap is not None
    assert snap.recent_input_rate == pytest.approx(1_000.0)
    assert snap.input_rate == pytest.approx((12_000 - 0) / 30)


@pytest.mark.parametrize(
    ("recent", "latest", "rate"),
    [
        (2_000.0, 3_000.0, 3_000.0),  # a step up five seconds ago: the latest window
        (1_000.0, 1_050.0, 1_000.0),  # noise: the recent window
        (1_000.0, 1_100.0, 1_000.0),  # a lead of exactly 10 % is not yet a step
        (1_000.0, 500.0, 1_000.0),  # a fall is not taken early
        (0.0, 200.0, 200.0),  # input after silence
        (0.0, 0.0, 0.0),
    ],
)
def test_step_rate(recent: float, latest: float, rate: float) -> None:
    assert step_rate(recent, latest) == rate


@given(
    st.floats(min_value=0, max_value=1e7, allow_nan=False),
    st.floats(min_value=0, max_value=1e7, allow_nan=False),
)
def test_step_rate_is_one_of_the_two_and_never_below_the_recent(
    recent: float, latest: float
) -> None:
    rate = step_rate(recent, latest)
    assert rate in (recent, latest)
    assert rate >= recent


def test_tracker_recent_input_rate_takes_a_step_from_the_latest_window() -> None:
    tracker = LagTracker(rate_window_s=30.0, recent_window_s=10.0, latest_window_s=5.0)
    for t in range(0, 31):  # 1 000 records/s, then 3 000 from 25 s
        end = 1_000 * t if t <= 25 else 25_000 + 3_000 * (t - 25)
        tracker.ingest(_sample(float(t), {("a", 0): (end, end)}))
    snap = tracker.snapshot("q", 30.0)
    assert snap is not None
    assert snap.recent_input_rate == pytest.approx(3_000.0)  # the 10 s average says 2 000
    steady = LagTracker(rate_window_s=30.0, recent_window_s=10.0, latest_window_s=5.0)
    for t in range(0, 31):
        end = 1_000 * t + (50 if t % 2 else 0)  # noise of 5 %
        steady.ingest(_sample(float(t), {("a", 0): (end, end)}))
    quiet = steady.snapshot("q", 30.0)
    assert quiet is not None
    assert quiet.recent_input_rate == pytest.approx(1_000.0)


def test_tracker_refresh_keeps_signal_fresh_and_forget_drops() -> None:
    tracker = LagTracker()
    tracker.refresh("q", 5.0)  # unknown query: nothing
    assert tracker.snapshot("q", 5.0) is None
    tracker.ingest(_sample(100.0, {("a", 0): (10, 10)}, batch=0))
    tracker.refresh("q", 130.0)
    tracker.refresh("q", 120.0)  # older: ignored
    snap = tracker.snapshot("q", 131.0)
    assert snap is not None and snap.age_s == pytest.approx(1.0)
    assert snap.total_lag == 0 and snap.max_time_lag_s == 0.0
    assert len(snap.batches) == 1
    tracker.forget("q")
    assert tracker.snapshot("q", 131.0) is None


def test_tracker_drops_partitions_no_longer_reported() -> None:
    tracker = LagTracker()
    tracker.ingest(_sample(1.0, {("a", 0): (10, 5), ("b", 0): (3, 3)}))
    tracker.ingest(_sample(2.0, {("a", 0): (12, 6)}))
    snap = tracker.snapshot("q", 2.0)
    assert snap is not None
    assert [(p.topic, p.partition) for p in snap.partitions] == [("a", 0)]


def test_tracker_bounds_batches() -> None:
    tracker = LagTracker(max_batches=3)
    for i in range(10):
        tracker.ingest(_sample(float(i), {("a", 0): (i, i)}, batch=i))
    snap = tracker.snapshot("q", 10.0)
    assert snap is not None
    assert [b.batch_id for b in snap.batches] == [7, 8, 9]
    assert snap.batch_durations.count == 10


def test_tracker_executors_and_decisions() -> None:
    tracker = LagTracker()
    tracker.set_executors("q", target=4)
    tracker.set_executors("q", running=2)
    tracker.set_executors("q", target=3)
    assert tracker.executors() == {"q": {"target": 3, "running": 2}}
    tracker.count_decision("up", "lag")
    tracker.count_decision("up", "lag", 2)
    tracker.count_decision("down", "idle")
    assert tracker.decisions() == {("up", "lag"): 3, ("down", "idle"): 1}
    with pytest.raises(ValueError):
        tracker.set_executors("q", target=-1)
    with pytest.raises(ValueError):
        tracker.count_decision("up", "lag", -1)
    assert tracker.lost() == 0
    tracker.count_lost(2)
    tracker.count_lost()
    assert tracker.lost() == 3
    with pytest.raises(ValueError):
        tracker.count_lost(-1)


def test_merge_offsets() -> None:
    merged = merge_offsets({("a", 0): 10, ("a", 1): 3}, {("a", 0): 4, ("a", 1): 5, ("b", 0): 7})
    assert merged == (
        PartitionOffsets("a", 0, 10, 4),
        PartitionOffsets("a", 1, 5, 5),  # an end below processed is stale: end = processed
        PartitionOffsets("b", 0, 7, 7),  # unknown end: nothing known beyond processed
    )


def test_batch_capacity() -> None:
    assert BatchStats(0, 0.0, 100, 0.5, 0.4).records_per_busy_second == 200.0
    assert BatchStats(0, 0.0, 100, 0.0, 0.0).records_per_busy_second == 0.0
