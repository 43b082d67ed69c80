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
    planned_data_loss,
    ranges,
    rate_limit,
    resolve_specific,
    split_ranges,
    to_json,
)

A0, A1, B0 = TopicPartition("a", 0), TopicPartition("a", 1), TopicPartition("b", 0)


P0, P1, P2 = TopicPartition("t", 0), TopicPartition("t", 1), TopicPartition("t", 2)


@pytest.mark.parametrize(
    ("start", "latest", "limit", "expected"),
    [
        # no limit, or no backlog: the latest offsets
        ({A0: 0, A1: 0}, {A0: 10, A1: 10}, None, {A0: 10, A1: 10}),
        ({A0: 7}, {A0: 7}, 3, {A0: 7}),
        ({A0: 0, A1: 0}, {A0: 10, A1: 10}, 100, {A0: 10, A1: 10}),
        ({A0: 0, A1: 0}, {A0: 10, A1: 10}, 10, {A0: 5, A1: 5}),
        ({A0: 5, A1: 0}, {A0: 5, A1: 10}, 4, {A0: 5, A1: 4}),
        # KafkaMicroBatchSourceSuite "maxOffsetsPerTrigger": 101 / 11 / 1 records, limit 10:
        # "1 from smallest, 1 from middle, 8 from biggest", then "1 more from middle, 9 more
        # from biggest", then the same again
        ({P0: 0, P1: 0, P2: 0}, {P0: 101, P1: 11, P2: 1}, 10, {P0: 8, P1: 1, P2: 1}),
        ({P0: 8, P1: 1, P2: 1}, {P0: 101, P1: 11, P2: 1}, 10, {P0: 17, P1: 2, P2: 1}),
        ({P0: 17, P1: 2, P2: 1}, {P0: 101, P1: 11, P2: 1}, 10, {P0: 26, P1: 3, P2: 1}),
        # 10 / 400 / 1,590 records, limit 300 (measured on Spark's connector 4.2.0 by
        # tests/integration/kafka/test_differential.py): shares are rounded down, so a batch
        # takes 299 records; the small partition gets 1 (1.5 rounded down), then 1 per batch
        ({P0: 0, P1: 0, P2: 0}, {P0: 10, P1: 400, P2: 1590}, 300, {P0: 1, P1: 60, P2: 238}),
        ({P0: 1, P1: 60, P2: 238}, {P0: 10, P1: 400, P2: 1590}, 300, {P0: 2, P1: 119, P2: 476}),
        # a share below one is rounded up: every partition with a backlog moves, and the batch
        # may take more than the limit
        ({A0: 0, A1: 0, B0: 0}, {A0: 1, A1: 1, B0: 1}, 2, {A0: 1, A1: 1, B0: 1}),
        ({A0: 0, A1: 0}, {A0: 1000, A1: 1}, 1, {A0: 1, A1: 1}),
        # a start beyond the latest offset: that partition ends at its latest (data loss is
        # the planner's to report), the others share the limit
        ({A0: 50, A1: 0}, {A0: 20, A1: 100}, 10, {A0: 20, A1: 10}),
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
    """Every partition with a backlog moves (none starves), none passes its latest offset,
    and the batch takes at most the limit plus one record per partition (the shares rounded
    up from below one)."""
    start = {tp: s for tp, (s, _) in parts.items()}
    latest = {tp: s + n for tp, (s, n) in parts.items()}
    end = rate_limit(start, latest, limit)
    assert set(end) == set(latest)
    for tp in latest:
        assert start[tp] <= end[tp] <= latest[tp]
        if latest[tp] > start[tp]:
            assert end[tp] > start[tp]
    taken = sum(end[tp] - start[tp] for tp in end)
    assert taken <= limit + len(parts)
    total = sum(latest[tp] - start[tp] for tp in latest)
    if total <= limit:  # all but the rounding of shares near their backlog
        assert taken >= total - len(parts)


@given(st.integers(0, 10**6), st.lists(st.integers(0, 10**4), min_size=1, max_size=20))
def test_largest_remainder_sums_exactly_and_respects_weights(
    total: int, weights: list[int]
) -> None:
    keyed = {TopicPartition("t", i): w for i, w in enumerate(weights)}
    shares = largest_remainder(total, keyed)
    assert sum(shares.values()) == min(total, sum(weights))
    assert all(0 <= shares[k] <= w for k, w in keyed.items())


Cut = tuple[str, int, int]  # topic, start, end (partition 1 of each topic)


@pytest.mark.parametrize(
    ("spans", "min_partitions", "expected"),
    [
        # KafkaOffsetRangeCalculatorSuite (Spark's connector), topics t1..t3, partition 1
        ([("t1", 1, 2)], None, [("t1", 1, 2)]),
        ([("t1", 1, 2), ("t2", 1, 1)], None, [("t1", 1, 2)]),
        ([("t1", 1, 2), ("t2", 1, 2), ("t3", 1, 2)], 3, [("t1", 1, 2), ("t2", 1, 2), ("t3", 1, 2)]),
        ([("t1", 1, 5)], 4, [("t1", 1, 2), ("t1", 2, 3), ("t1", 3, 4), ("t1", 4, 5)]),
        (
            [("t1", 1, 5), ("t2", 1, 21)],
            4,
            [("t1", 1, 5), ("t2", 1, 7), ("t2", 7, 14), ("t2", 14, 21)],
        ),
        (
            [("t1", 1, 1), ("t2", 1, 21)],
            4,
            [("t2", 1, 6), ("t2", 6, 11), ("t2", 11, 16), ("t2", 16, 21)],
        ),
        (
            [("t1", 1, 2), ("t2", 1, 1001)],
            4,
            [("t1", 1, 2), ("t2", 1, 334), ("t2", 334, 667), ("t2", 667, 1001)],
        ),
        ([("t1", 1, 5), ("t2", 1, 21)], 1, [("t1", 1, 5), ("t2", 1, 21)]),
        ([("t1", 1, 11)], 3, [("t1", 1, 4), ("t1", 4, 7), ("t1", 7, 11)]),
        (
            [("t1", 0, 10), ("t2", 0, 10), ("t3", 0, 1)],
            6,
            [
                ("t1", 0, 3), ("t1", 3, 6), ("t1", 6, 10),
                ("t2", 0, 3), ("t2", 3, 6), ("t2", 6, 10),
                ("t3", 0, 1),
            ],
        ),
        (
            [("t1", 0, 10000), ("t2", 0, 15000), ("t3", 0, 20000)],
            9,
            [
                ("t1", 0, 5000), ("t1", 5000, 10000),
                ("t2", 0, 5000), ("t2", 5000, 10000), ("t2", 10000, 15000),
                ("t3", 0, 5000), ("t3", 5000, 10000), ("t3", 10000, 15000), ("t3", 15000, 20000),
            ],
        ),
        (
            [("t1", 0, 500), ("t2", 0, 12000), ("t3", 0, 15001)],
            6,
            [
                ("t1", 0, 500),
                ("t2", 0, 6000), ("t2", 6000, 12000),
                ("t3", 0, 5000), ("t3", 5000, 10000), ("t3", 10000, 15001),
            ],
        ),
        (
            [("t1", 0, 1), ("t2", 0, 1), ("t3", 0, 10000)],
            6,
            [
                ("t1", 0, 1), ("t2", 0, 1),
                ("t3", 0, 2500), ("t3", 2500, 5000), ("t3", 5000, 7500), ("t3", 7500, 10000),
            ],
        ),
        ([("t1", 0, 1), ("t2", 0, 1), ("t3", 0, 2)], 4, [
            ("t1", 0, 1), ("t2", 0, 1), ("t3", 0, 1), ("t3", 1, 2),
        ]),
        # 10 / 400 / 1,590 records, minPartitions 8 (the differential test's case): the small
        # range stays whole, the others share 7 tasks: 400 -> 1 (1.41), 1,590 -> 6 (5.59)
        (
            [("t1", 0, 10), ("t2", 0, 400), ("t3", 0, 1590)],
            8,
            [("t1", 0, 10), ("t2", 0, 400)] + [("t3", 265 * i, 265 * (i + 1)) for i in range(6)],
        ),
        # rounding can give more tasks than asked (3 / 3 / 3 in 5: 2 each, 6 tasks) or fewer
        # (10 / 10 / 10 in 4: round(1.33) = 1 each, 3 tasks)
        ([("t1", 0, 3), ("t2", 0, 3), ("t3", 0, 3)], 5, [
            ("t1", 0, 1), ("t1", 1, 3), ("t2", 0, 1), ("t2", 1, 3), ("t3", 0, 1), ("t3", 1, 3),
        ]),
        ([("t1", 0, 10), ("t2", 0, 10), ("t3", 0, 10)], 4, [
            ("t1", 0, 10), ("t2", 0, 10), ("t3", 0, 10),
        ]),
        # halves round up (Java's Math.round, not Python's round): 5 / 3 in 4 -> 2.5 -> 3
        # pieces and 1.5 -> 2
        ([("t1", 0, 5), ("t2", 0, 3)], 4, [
            ("t1", 0, 1), ("t1", 1, 3), ("t1", 3, 5), ("t2", 0, 1), ("t2", 1, 3),
        ]),
    ],
)  # fmt: skip
def test_split_ranges_as_spark(
    spans: list[Cut], min_partitions: int | None, expected: list[Cut]
) -> None:
    rs = [OffsetRange(t, 1, s, e) for t, s, e in spans]
    pieces = split_ranges(rs, min_partitions)
    assert [(p.topic, p.start, p.end) for p in pieces] == expected


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
    assert len(pieces) >= sum(1 for r in rs if r.size)


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


@pytest.mark.parametrize(
    ("start", "end", "added", "expected"),
    [
        ({A0: 5, A1: 3}, {A0: 9, A1: 3}, {}, []),
        ({A0: 5}, {A0: 9, A1: 4}, {A1: 0}, []),  # a new partition read from offset 0
        ({A0: 5}, {A0: 9, A1: 4}, {A1: 2}, ["added partition a-1 starts at offset 2, not 0"]),
        ({A0: 5, B0: 1}, {A0: 9}, {}, ["partitions b-0 have been deleted"]),
        (
            {A0: 500, A1: 3},
            {A0: 50, A1: 9},
            {},
            [
                "partition a-0: the end offset 50 is below the start offset 500 (a start "
                "offset beyond the available offsets, or the topic deleted and re-created)"
            ],
        ),
    ],
)
def test_planned_data_loss(
    start: dict[TopicPartition, int],
    end: dict[TopicPartition, int],
    added: dict[TopicPartition, int],
    expected: list[str],
) -> None:
    assert planned_data_loss(start, end, added) == expected


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
    assert [(b.tp, b.lost) for b in bad] == [(A0, True), (A1, False)]
    assert bad[0].message() == (
        "offset out of range on topic a partition 0: records 1..2 are no longer available "
        "(available: 3..10)"
    )
    assert "offset 100 is beyond the end offset 50" in bad[1].message()
