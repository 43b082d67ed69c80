"""Rate profiles: totals from count or duration, and schedules consistent both ways."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from streamscale.generate.profiles import ProfileError, Schedule, make_schedule


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"kind": "wave", "rate": 10, "count": 5}, "unknown profile"),
        ({"kind": "steady", "rate": 10}, "exactly one"),
        ({"kind": "steady", "rate": 10, "count": 5, "duration_s": 1}, "exactly one"),
        ({"kind": "steady", "rate": 10, "count": -1}, "--count"),
        ({"kind": "steady", "rate": 10, "duration_s": 0}, "--duration"),
        ({"kind": "steady", "rate": 0, "count": 5}, "--rate"),
        ({"kind": "steady", "rate": math.inf, "count": 5}, "--rate"),
        ({"kind": "burst", "rate": 10, "duration_s": 5}, "give --count"),
        ({"kind": "ramp", "rate": 10, "count": 5, "start_rate": -1}, "--start-rate"),
    ],
)
def test_invalid_options(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ProfileError, match=message):
        make_schedule(**kwargs)  # type: ignore[arg-type]


def test_steady() -> None:
    s = make_schedule("steady", rate=100, count=250)
    assert s.total == 250
    assert s.due(0) == 1
    assert s.due(0.5) == 51
    assert s.due(10) == 250
    assert s.time_of(100) == pytest.approx(1.0)
    assert s.nominal_seconds == pytest.approx(2.49)


def test_steady_duration_counts_records_due_before_the_end() -> None:
    assert make_schedule("steady", rate=100, duration_s=2.5).total == 250
    assert make_schedule("steady", rate=3, duration_s=1).total == 3
    assert make_schedule("steady", rate=0.5, duration_s=3).total == 2


def test_burst_is_all_due_at_once() -> None:
    s = make_schedule("burst", rate=1, count=1000)
    assert s.due(0) == 1000
    assert s.time_of(999) == 0
    assert s.nominal_seconds == 0


def test_ramp_with_count_rises_linearly_to_the_rate() -> None:
    s = make_schedule("ramp", rate=1000, start_rate=0, count=5000)
    assert s.ramp_s == pytest.approx(10.0)  # average rate 500/s
    assert s.due(10.0) == 5000
    assert s.due(5.0) == pytest.approx(1250, abs=1)  # a quarter of the records by half-time
    # The instantaneous rate near the end is close to --rate.
    assert 1 / (s.time_of(4999) - s.time_of(4998)) == pytest.approx(1000, rel=0.01)


def test_ramp_with_duration() -> None:
    s = make_schedule("ramp", rate=300, start_rate=100, duration_s=10)
    assert s.total == 2000
    assert s.ramp_s == 10
    assert s.time_of(s.total - 1) < 10


def test_ramp_down_is_allowed() -> None:
    s = make_schedule("ramp", rate=100, start_rate=300, count=2000)
    assert s.ramp_s == pytest.approx(10.0)
    assert s.time_of(1000) < 5.0  # faster first


schedules = st.one_of(
    st.builds(
        lambda rate, count: make_schedule("steady", rate=rate, count=count),
        st.floats(0.1, 1e6),
        st.integers(1, 10**6),
    ),
    st.builds(
        lambda rate, start, count: make_schedule("ramp", rate=rate, start_rate=start, count=count),
        st.floats(0.1, 1e6),
        st.floats(0, 1e6),
        st.integers(1, 10**6),
    ),
    st.builds(
        lambda rate, start, duration: make_schedule(
            "ramp", rate=rate, start_rate=start, duration_s=duration
        ),
        st.floats(0.1, 1e4),
        st.floats(0, 1e4),
        st.floats(0.01, 100),
    ),
)


@given(schedules, st.floats(0, 1))
def test_time_of_and_due_agree(schedule: Schedule, fraction: float) -> None:
    index = min(int(fraction * schedule.total), schedule.total - 1)
    if schedule.total == 0:
        return
    t = schedule.time_of(index)
    assert t >= 0
    assert schedule.due(t) >= index + 1  # record index is due at its time
    if index > 0:
        assert schedule.time_of(index - 1) <= t
        assert schedule.due(t * (1 - 1e-6) - 1e-6) <= index + 1


@given(schedules, st.floats(0, 1000), st.floats(0, 1000))
def test_due_is_monotonic_and_capped(schedule: Schedule, a: float, b: float) -> None:
    lo, hi = sorted((a, b))
    assert 0 <= schedule.due(lo) <= schedule.due(hi) <= schedule.total


@pytest.mark.parametrize(
    ("index", "elapsed_s", "tick_s", "wait_s"),
    [
        (100, 0.0, 0.01, 1.01),  # due at 1 s, released a tick later
        (100, 1.0, 0.01, 0.01),  # due now: one tick to go
        (100, 1.005, 0.01, 0.005),
        (100, 1.01, 0.01, 0.0),  # a tick past due: go
        (100, 3.0, 0.01, 0.0),  # behind the schedule: never waits
        (100, 0.5, 0.0, 0.5),  # no tick: wait until due
    ],
)
def test_release_wait_at_100_per_s(
    index: int, elapsed_s: float, tick_s: float, wait_s: float
) -> None:
    s = make_schedule("steady", rate=100, count=1000)
    assert s.release_wait(index, elapsed_s, tick_s) == pytest.approx(wait_s)


def test_release_wait_refuses_a_negative_tick() -> None:
    with pytest.raises(ProfileError, match="tick"):
        make_schedule("steady", rate=100, count=10).release_wait(1, 0.0, -0.01)


@given(
    rate=st.floats(1, 200_000),
    tick_s=st.floats(0.001, 0.1),
    elapsed_s=st.floats(0, 60),
)
def test_releasing_in_ticks_sends_nothing_early_and_a_tick_worth_a_wake(
    rate: float, tick_s: float, elapsed_s: float
) -> None:
    """Simulate the produce loop's pacing: from a record not yet due, wait, then send all
    that is due; every record sent is due, the first at most a tick late, and a wake sends
    about ``rate × tick`` records (at least one)."""
    s = make_schedule("steady", rate=rate, count=10**9)
    first = s.due(elapsed_s)  # the next record to send; not yet due at elapsed_s
    wake = elapsed_s + s.release_wait(first, elapsed_s, tick_s)
    sent_up_to = s.due(wake)  # records first..sent_up_to-1 go out at the wake
    assert sent_up_to > first
    assert s.time_of(sent_up_to - 1) <= wake + 1e-9  # none early
    assert wake - s.time_of(first) <= tick_s + 1e-9  # none more than a tick late
    assert sent_up_to - first <= math.floor(rate * tick_s) + 2
