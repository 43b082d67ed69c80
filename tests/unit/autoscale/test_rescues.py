"""How the latest rescue of a violating run differs from the run (issue 38)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from streamscale.autoscale import rescues
from streamscale.autoscale.rescues import Kind
from streamscale.errors import ConfigError


@pytest.mark.parametrize(
    ("counts", "tick", "found", "violation", "kind", "least", "change"),
    [
        # stateful 1011: 4 held from 890 s rescues; rate topped up to 5 there
        ((2, 4, 4, 5, 5, 5), 3, (4,), 5, Kind.HOLD, 4, 3),
        # the top-up comes a tick after the rescue's
        ((3, 3, 3, 5, 5), 2, (3, 4), 4, Kind.HOLD, 3, 3),
        # stateful 1073: a scale-down 4 → 3 where 4 held rescues
        ((4, 4, 4, 3, 3, 4), 2, (4, 5), 5, Kind.NO_SCALE_DOWN, 4, 3),
        # stateful 1064: held 5 at the rescue's tick, 8 a tick later
        ((4, 5, 5, 8, 8), 2, (7, 8), 3, Kind.SOONER, 7, 3),
        # stateful 1026: a step to 6 where 7 or 8 were needed
        ((4, 4, 6, 8, 8), 2, (7, 8), 4, Kind.MORE, 7, None),
        # never reached before the violation
        ((1, 1, 1, 2, 2), 2, (4, 5), 4, Kind.MORE, 4, None),
        # stateful 1093: 5 → 8 where only 7 rescues (8's reload pauses longer)
        ((5, 5, 8, 8), 2, (7,), 3, Kind.FEWER, 7, None),
        # a rescuing count reached at the tick, then left
        ((3, 3, 6, 4), 2, (6, 7), 3, Kind.CHANGED_AGAIN, 6, None),
    ],
)
def test_compare(
    counts: tuple[int, ...],
    tick: int,
    found: tuple[int, ...],
    violation: int,
    kind: Kind,
    least: int,
    change: int | None,
) -> None:
    difference = rescues.compare(counts, tick, found, violation)
    assert difference.kind is kind
    assert difference.least == least
    assert difference.was == counts[tick - 1]
    assert difference.asked == counts[tick]
    assert difference.change_tick == change


@pytest.mark.parametrize(
    ("counts", "tick", "found", "violation"),
    [
        ((1, 2, 3), 1, (), 2),  # no rescue
        ((1, 2, 3), 0, (2,), 2),  # no count before the tick
        ((1, 2, 3), 2, (2,), 1),  # violation before the rescue
        ((1, 2, 3), 1, (2,), 3),  # violation past the counts
    ],
)
def test_compare_refuses(
    counts: tuple[int, ...], tick: int, found: tuple[int, ...], violation: int
) -> None:
    with pytest.raises(ConfigError):
        rescues.compare(counts, tick, found, violation)


@st.composite
def cases(draw: st.DrawFn) -> tuple[list[int], int, list[int], int]:
    counts = draw(st.lists(st.integers(1, 8), min_size=2, max_size=30))
    tick = draw(st.integers(1, len(counts) - 1))
    violation = draw(st.integers(tick, len(counts) - 1))
    low = counts[tick - 1]
    found = draw(st.lists(st.integers(low, 8), min_size=1, max_size=8, unique=True))
    return counts, tick, found, violation


@given(cases())
def test_compare_is_consistent(case: tuple[list[int], int, list[int], int]) -> None:
    counts, tick, found, violation = case
    d = rescues.compare(counts, tick, found, violation)
    assert d.least == min(found)
    if d.kind in (Kind.HOLD, Kind.NO_SCALE_DOWN):
        assert d.was in found
        if d.change_tick is not None:
            assert counts[d.change_tick] != d.was
            assert all(c == d.was for c in counts[tick : d.change_tick])
            assert (counts[d.change_tick] < d.was) == (d.kind is Kind.NO_SCALE_DOWN)
    else:
        assert d.was not in found
    if d.kind is Kind.SOONER:
        assert d.asked == d.was
        assert d.change_tick is not None and tick < d.change_tick <= violation
        assert counts[d.change_tick] >= d.least
    if d.kind is Kind.MORE:
        assert d.asked < d.least
    if d.kind is Kind.FEWER:
        assert d.asked > d.least and d.asked not in found
    if d.kind is Kind.CHANGED_AGAIN:
        assert d.asked in found
