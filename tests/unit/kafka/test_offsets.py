"""Offset arithmetic: range splitting, read-limit sharing, resolution of starting offsets."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from streamscale.kafka.offsets import (
    OffsetError,
    OffsetRange,
    TopicPartition,
    from_json,
    largest_remainder,
    out_of_range,
    parse_assign,
    ranges,
    rate_limit,
    resolve_specific,
    split_ranges,
    to_json,
)

A0, A1, B0 = TopicPartition("a", 0), TopicPartition("a", 1), TopicPartition("b", 0)


@pytest.mark.parametrize(
    ("start", "latest", "limit", "expected"),
    [
        ({A0: 0, A1: 0}, {A0: 10, A1: 10}, None, {A0: 10, A1: 10}),
        ({A0: 0, A1: 0}, {A0: 10, A1: 10}, 100, {A0: 10, A1: 10}),
        ({A0: 0, A1: 0}, {A0: 10, A1: 10}, 10, {A0: 5, A1: 5}),
        ({A0: 0, A1: 0}, {A0: 30, A1: 10}, 8, {A0: 6, A1: 2}),
        ({A0: 5, A1: 0}, {A0: 5, A1: 10}, 4, {A0: 5, A1: 4}),
        ({A0: 0, A1: 0, B0: 0}, {A0: 1, A1: 1, B0: 1}, 2, {A0: 1, A1: 1, B0: 0}),
        ({A0: 7}, {A0: 7}, 3, {A0: 7}),
    ],
)
def test_rate_limit_table(
    start: dict[TopicPartition, int],
    latest: dict[TopicPartition, int],
    limit: int | None,
    expected: dict[TopicPartition, int],
) -> None:
    assert rate_limit(start, latest, limit) == expected


backlogs = st.dictionaries(
    st.builds(TopicPartition, st.sampled_from(["a", "b", "c"]), st.integers(0, 5)),
    st.tuples(st.integers(0, 10**6), st.integers(0, 10**5)),
    min_size=1,
    max_size=12,
)


@given(backlogs, st.integers(1, 10**6))
def test_rate_limit_properties(parts: dict[TopicPartition, tuple[int, int]], limit: int) -> None:
    start = {tp: s for tp, (s, _) in parts.items()}
    latest = {tp: s + n for tp, (s, n) in parts.items()}
    end = rate_limit(start, latest, limit)
    assert set(end) == set(latest)
    for tp in latest:
        assert start[tp] <= end[tp] <= latest[tp]
    total = sum(latest[tp] - start[tp] for tp in latest)
    assert sum(end[tp] - start[tp] for tp in end) == min(limit, total)


@given(st.integers(0, 10**6), st.lists(st.integers(0, 10**4), min_size=1, max_size=20))
def test_largest_remainder_sums_exactly_and_respects_weights(
    total: int, weights: list[int]
) -> None:
    keyed = {TopicPartition("t", i): w for i, w in enumerate(weights)}
    shares = largest_remainder(total, keyed)
    assert sum(shares.values()) == min(total, sum(weights))
    assert all(0 <= shares[k] <= w for k, w in keyed.items())


@pytest.mark.parametrize(
    ("sizes", "min_partitions", "expected_count"),
    [
        ([10, 10], None, 2),
        ([10, 10], 2, 2),
        ([10, 10], 1, 2),
        ([10, 10], 4, 4),
        ([30, 10], 4, 4),
        ([3], 10, 3),
        ([0, 5], 3, 3),
        ([1, 1, 1], 8, 3),
    ],
)
def test_split_ranges_table(
    sizes: list[int], min_partitions: int | None, expected_count: int
) -> None:
    rs = [OffsetRange("t", i, 100, 100 + n) for i, n in enumerate(sizes)]
    pieces = split_ranges(rs, min_partitions)
    assert len(pieces) == expected_count


def test_split_ranges_gives_more_pieces_to_bigger_ranges() -> None:
    pieces = split_ranges([OffsetRange("t", 0, 0, 300), OffsetRange("t", 1, 0, 100)], 4)
    assert [p.partition for p in pieces] == [0, 0, 0, 1]
    assert [(p.start, p.end) for p in pieces] == [(0, 100), (100, 200), (200, 300), (0, 100)]


@given(
    st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 5000)), min_size=1, max_size=10),
    st.one_of(st.none(), st.integers(1, 64)),
)
def test_split_ranges_covers_every_offset_exactly_once(
    spans: list[tuple[int, int]], min_partitions: int | None
) -> None:
    rs = [OffsetRange("t", i, s, s + n) for i, (s, n) in enumerate(spans)]
    pieces = split_ranges(rs, min_partitions)
    for r in rs:
        mine = sorted((p.start, p.end) for p in pieces if p.partition == r.partition)
        covered = [o for s, e in mine for o in range(s, e)] if r.size <= 5000 else []
        assert covered == list(range(r.start, r.end))
        assert all(e > s for s, e in mine)
    total = sum(r.size for r in rs)
    non_empty = sum(1 for r in rs if r.size)
    assert len(pieces) >= min(min_partitions or 0, total)
    assert len(pieces) >= non_empty


def test_ranges_skip_empty_and_use_end_for_unknown_start() -> None:
    assert ranges({A0: 5, A1: 3}, {A0: 5, A1: 9, B0: 4}) == [OffsetRange("a", 1, 3, 9)]


def test_json_round_trip_and_errors() -> None:
    offsets = {A0: 1, A1: 2, B0: 3}
    assert to_json(offsets) == {"a": {"0": 1, "1": 2}, "b": {"0": 3}}
    assert from_json(to_json(offsets)) == offsets
    assert from_json('{"a": {"0": 1}}') == {A0: 1}
    for bad in ["{", "[1]", '{"a": 1}', '{"a": {"x": 1}}', '{"a": {"0": "1"}}']:
        with pytest.raises(OffsetError):
            from_json(bad)


def test_parse_assign() -> None:
    assert parse_assign('{"b": [0], "a": [1, 0]}') == [A0, A1, B0]
    for bad in ["", "[]", '{"a": 0}', '{"a": [-1]}', "{}"]:
        with pytest.raises(OffsetError):
            parse_assign(bad)


def test_resolve_specific_offsets() -> None:
    earliest, latest = {A0: 2, A1: 0}, {A0: 50, A1: 60}
    assert resolve_specific({A0: -2, A1: -1}, [A0, A1], earliest, latest) == {A0: 2, A1: 60}
    assert resolve_specific({A0: 7, A1: 8}, [A0, A1], earliest, latest) == {A0: 7, A1: 8}
    with pytest.raises(OffsetError, match="a-1"):
        resolve_specific({A0: 7}, [A0, A1], earliest, latest)
    with pytest.raises(OffsetError, match="b-0"):
        resolve_specific({A0: 7, A1: 8, B0: 1}, [A0, A1], earliest, latest)
    with pytest.raises(OffsetError, match="negative"):
        resolve_specific({A0: -5, A1: 1}, [A0, A1], earliest, latest)


def test_out_of_range_classification_and_messages() -> None:
    bad = out_of_range({A0: 1, A1: 100, B0: 5}, {A0: 3, A1: 0, B0: 0}, {A0: 10, A1: 50, B0: 5})
    assert [(b.tp, b.lost, b.reset_to) for b in bad] == [(A0, True, 3), (A1, False, 50)]
    assert bad[0].message() == (
        "offset out of range on topic a partition 0: records 1..2 are no longer available "
        "(available: 3..10)"
    )
    assert "offset 100 is beyond the end offset 50" in bad[1].message()
