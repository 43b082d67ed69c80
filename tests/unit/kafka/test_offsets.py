"""Offset arithmetic: range splitting, co-partitioned groups, read-limit sharing, resolution of
starting offsets."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streamscale.kafka.offsets import (
    OffsetError,
    OffsetRange,
    TopicPartition,
    check_co_partitioned,
    co_partition,
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


def test_co_partition_groups_by_partition_number_sorted() -> None:
    """One group per partition number (in order), its ranges sorted by topic; empty skipped."""
    groups = co_partition(
        [
            OffsetRange("b", 1, 0, 3),
            OffsetRange("a", 1, 5, 6),
            OffsetRange("a", 0, 7, 7),
            OffsetRange("b", 0, 10, 20),
            OffsetRange("a", 2, 0, 1),
        ],
        None,
    )
    assert groups == [
        (OffsetRange("b", 0, 10, 20),),
        (OffsetRange("a", 1, 5, 6), OffsetRange("b", 1, 0, 3)),
        (OffsetRange("a", 2, 0, 1),),
    ]
    assert co_partition([], 4) == []
    assert co_partition([OffsetRange("a", 0, 5, 5)], 4) == []


@pytest.mark.parametrize(
    ("ranges_", "min_partitions", "expected"),
    [
        # piece i of every topic of a group is read together, cut in the same proportions
        (
            [("a", 0, 0, 100), ("b", 0, 0, 50)],
            2,
            [(("a", 0, 0, 50), ("b", 0, 0, 25)), (("a", 0, 50, 100), ("b", 0, 25, 50))],
        ),
        # no more pieces than the group's largest range has records
        (
            [("a", 0, 0, 3), ("b", 0, 10, 13)],
            10,
            [(("a", 0, i, i + 1), ("b", 0, 10 + i, 11 + i)) for i in range(3)],
        ),
        # a small range is only in the pieces it has records for
        (
            [("a", 0, 0, 4), ("b", 0, 0, 1)],
            4,
            [
                (("a", 0, 0, 1),),
                (("a", 0, 1, 2),),
                (("a", 0, 2, 3),),
                (("a", 0, 3, 4), ("b", 0, 0, 1)),
            ],
        ),
        # enough groups already: left whole
        ([("a", 0, 0, 9), ("a", 1, 0, 9)], 2, [(("a", 0, 0, 9),), (("a", 1, 0, 9),)]),
    ],
)
def test_co_partition_pieces_table(
    ranges_: list[tuple[str, int, int, int]],
    min_partitions: int,
    expected: list[tuple[tuple[str, int, int, int], ...]],
) -> None:
    pieces = co_partition([OffsetRange(*r) for r in ranges_], min_partitions)
    assert pieces == [tuple(OffsetRange(*r) for r in piece) for piece in expected]


@settings(max_examples=60)
@given(
    st.dictionaries(
        st.tuples(st.sampled_from(["a", "b", "c"]), st.integers(0, 5)),
        st.tuples(st.integers(0, 10**6), st.integers(0, 300)),
        min_size=1,
        max_size=12,
    ),
    st.one_of(st.none(), st.integers(1, 40)),
)
def test_co_partition_reads_every_record_once_in_aligned_groups(
    parts: dict[tuple[str, int], tuple[int, int]], min_partitions: int | None
) -> None:
    """Every record in exactly one piece; a piece holds one partition number, each topic at
    most once; pieces of one partition come in offset order; at least ``min_partitions``
    pieces as far as records allow (a piece per record of each group's largest range)."""
    rs = [OffsetRange(t, p, s, s + n) for (t, p), (s, n) in parts.items()]
    pieces = co_partition(rs, min_partitions)
    read: dict[tuple[str, int], list[tuple[int, int]]] = {}
    for piece in pieces:
        assert piece and len({r.partition for r in piece}) == 1
        assert [r.topic for r in piece] == sorted({r.topic for r in piece})
        for r in piece:
            assert r.end > r.start
            read.setdefault((r.topic, r.partition), []).append((r.start, r.end))
    for r in rs:
        mine = read.get((r.topic, r.partition), [])
        assert mine == sorted(mine)  # in offset order, so the cuts of one group line up
        assert [o for s, e in mine for o in range(s, e)] == list(range(r.start, r.end))
    assert [p[0].partition for p in pieces] == sorted(p[0].partition for p in pieces)
    largest: dict[int, int] = {}
    for r in rs:
        largest[r.partition] = max(largest.get(r.partition, 0), r.size)
    groups = sum(1 for n in largest.values() if n)
    if min_partitions is None or min_partitions <= groups:
        assert len(pieces) == groups
    else:
        assert len(pieces) == min(min_partitions, sum(largest.values()))


def test_check_co_partitioned_needs_equal_partition_counts() -> None:
    """Equal counts (or one topic) pass; otherwise the error names each topic's count."""
    check_co_partitioned([A0, A1, TopicPartition("b", 0), TopicPartition("b", 1)])
    check_co_partitioned([A0, A1])
    check_co_partitioned([])
    with pytest.raises(OffsetError, match=r"a has 2, b has 1") as error:
        check_co_partitioned([A0, A1, B0])
    assert "coPartitioned needs topics with the same number of partitions" in str(error.value)


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
