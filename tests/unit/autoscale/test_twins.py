"""Twins of a trace (issue 38): the same seconds up to ``from_s``, a rise lasting after it;
and the runs of ticks where `rate` bought what a peer held."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streamscale.autoscale import family, twins
from streamscale.autoscale.traces import Trace
from streamscale.errors import ConfigError

rates_st = st.lists(st.floats(0.0, 10_000.0), min_size=1, max_size=200)


@pytest.mark.parametrize(
    ("rates", "from_s", "window_s", "expected"),
    [
        ((1.0, 2.0, 3.0, 4.0), 4, 2, 3.5),
        ((1.0, 2.0, 3.0, 4.0), 2, 5, 1.5),  # fewer seconds at the start
        ((1.0, 2.0, 3.0, 4.0), 0, 3, 0.0),  # nothing seen yet
        ((5.0,), 9, 3, 0.0),  # past the trace's end
    ],
)
def test_level_before(
    rates: tuple[float, ...], from_s: int, window_s: int, expected: float
) -> None:
    assert twins.level_before(rates, from_s, window_s) == pytest.approx(expected)


@pytest.mark.parametrize(
    ("rates", "from_s", "level", "horizon_s", "expected"),
    [
        ((1.0, 9.0, 9.0, 1.0, 1.0, 1.0), 3, 9.0, 2, (1.0, 9.0, 9.0, 9.0, 9.0)),  # a spike lasts
        ((1.0, 9.0, 9.0, 12.0, 1.0), 3, 9.0, 9, (1.0, 9.0, 9.0, 12.0, 9.0)),  # higher kept
        ((1.0, 2.0), 0, 5.0, 1, (5.0,)),
        ((1.0, 2.0, 3.0), 2, 0.0, 0, (1.0, 2.0)),  # no horizon: the seconds before from_s
    ],
)
def test_lasting(
    rates: tuple[float, ...],
    from_s: int,
    level: float,
    horizon_s: int,
    expected: tuple[float, ...],
) -> None:
    assert twins.lasting(rates, from_s, level, horizon_s) == expected


@settings(max_examples=60, deadline=None)
@given(rates_st, st.integers(0, 250), st.floats(0.0, 10_000.0), st.integers(0, 250))
def test_a_twin_is_the_trace_up_to_its_second_and_never_below_its_level_after(
    rates: list[float], from_s: int, level: float, horizon_s: int
) -> None:
    twin = twins.lasting(rates, from_s, level, horizon_s)
    assert len(twin) == min(len(rates), from_s + horizon_s)
    head = min(from_s, len(twin))
    assert twin[:head] == tuple(rates[:head])
    assert all(x >= level and x >= r for x, r in zip(twin[head:], rates[head:], strict=False))


def test_a_twin_trace_of_a_generated_seed() -> None:
    trace = family.generate(1009)  # a +450 spike at 150 s for 12 s on 640 records/s
    twin, level = twins.twin_trace(trace, 160, 5, 300)
    rates = trace.per_second()
    assert twin.per_second()[:160] == rates[:160]
    assert len(twin.per_second()) == 460
    assert level == pytest.approx(sum(rates[155:160]) / 5)
    assert level > 900  # the spike's level, not the base's
    assert min(twin.per_second()[160:]) >= level


@pytest.mark.parametrize("bad", [(-1, 10), (5, -1)])
def test_a_twin_needs_a_second_and_a_horizon(bad: tuple[int, int]) -> None:
    with pytest.raises(ConfigError):
        twins.lasting((1.0, 2.0), bad[0], 1.0, bad[1])
    with pytest.raises(ConfigError):
        twins.level_before((1.0,), 1, 0)


@pytest.mark.parametrize(
    ("rate", "peer", "expected"),
    [
        ((2, 2, 3, 3, 2), (2, 2, 2, 2, 2), [twins.Buy(2, 3, 2, 3)]),
        ((2, 3, 5, 2, 3, 2), (2, 2, 2, 2, 2, 2), [twins.Buy(1, 2, 2, 5), twins.Buy(4, 4, 2, 3)]),
        ((2, 2, 2), (2, 1, 1), []),  # the peer scaled down, rate did not: no bet of rate
        ((2, 2, 3), (2, 2, 3), []),  # the same counts
        ((2, 3, 3), (2, 2, 3), [twins.Buy(1, 1, 2, 3)]),  # the peer followed a tick later
    ],
)
def test_buys(rate: tuple[int, ...], peer: tuple[int, ...], expected: list[twins.Buy]) -> None:
    assert twins.buys(rate, peer) == expected


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 8), st.integers(1, 8)), min_size=1, max_size=60))
def test_every_buy_is_a_run_of_ticks_above_the_peer_that_rate_began(
    pairs: list[tuple[int, int]],
) -> None:
    rate = [r for r, _ in pairs]
    peer = [p for _, p in pairs]
    found = twins.buys(rate, peer)
    for b in found:
        run = range(b.first_tick, b.last_tick + 1)
        assert all(rate[k] > peer[k] for k in run)
        assert b.first_tick > 0 and rate[b.first_tick] > rate[b.first_tick - 1]
        assert b.last_tick + 1 == len(rate) or rate[b.last_tick + 1] <= peer[b.last_tick + 1]
        assert b.most == max(rate[k] for k in run) and b.held == peer[b.first_tick]
    assert [b.first_tick for b in found] == sorted({b.first_tick for b in found})


def test_buys_need_one_count_per_tick_for_both() -> None:
    with pytest.raises(ConfigError):
        twins.buys((1, 2), (1,))


def test_twin_trace_is_a_trace() -> None:
    trace = Trace("t", ((0.0, 1.0), (3.0, 5.0)), 6)
    twin, level = twins.twin_trace(trace, 4, 1, 10)
    assert level == 5.0 and twin.per_second() == (1.0, 1.0, 1.0, 5.0, 5.0, 5.0)
