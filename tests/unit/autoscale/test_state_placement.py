"""The pure parts of the state placement reader: task placement, per-executor sums."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from streamscale.autoscale.state_placement import (
    LoadedState,
    StatePartition,
    TaskRecord,
    is_stateful_graph,
    loaded_by_executor,
    locality_wait_s,
    placement_from_tasks,
    spark_time_s,
    spread_plan,
    stage_span_s,
)


@pytest.mark.parametrize(
    ("tasks", "expected"),
    [
        ([], {}),
        (
            [TaskRecord(10, 1, "1", "SUCCESS"), TaskRecord(9, 0, "0", "SUCCESS")],
            {0: "0", 1: "1"},
        ),
        # a failed attempt loaded nothing that stays: its retry's executor holds the partition
        ([TaskRecord(10, 0, "0", "FAILED"), TaskRecord(12, 0, "1", "SUCCESS")], {0: "1"}),
        ([TaskRecord(10, 0, "0", "KILLED"), TaskRecord(11, 0, "1", "RUNNING")], {}),
        # two successful attempts (speculation): the later one's executor
        ([TaskRecord(13, 0, "1", "SUCCESS"), TaskRecord(12, 0, "0", "SUCCESS")], {0: "1"}),
    ],
)
def test_placement_from_tasks(tasks: list[TaskRecord], expected: dict[int, str]) -> None:
    assert placement_from_tasks(tasks) == expected


@pytest.mark.parametrize(
    ("partitions", "expected"),
    [
        ([], {}),
        (
            [
                StatePartition("q", 0, "1", 5981),
                StatePartition("q", 1, "0", 419),
                StatePartition("q", 2, "1", 230),
                StatePartition("q", 3, "0", 408),
            ],
            {"0": LoadedState(2, 827), "1": LoadedState(2, 6211)},
        ),
        # two queries on the same executor add up
        (
            [StatePartition("a", 0, "0", 10), StatePartition("b", 0, "0", 5)],
            {"0": LoadedState(2, 15)},
        ),
        # one size unknown makes the executor's total unknown
        (
            [StatePartition("q", 0, "0", 10), StatePartition("q", 1, "0", None)],
            {"0": LoadedState(2, None)},
        ),
    ],
)
def test_loaded_by_executor(
    partitions: list[StatePartition], expected: dict[str, LoadedState]
) -> None:
    assert loaded_by_executor(partitions) == expected


@given(
    st.lists(st.tuples(st.sampled_from("0123"), st.integers(0, 10_000)), min_size=0, max_size=20)
)
def test_loaded_by_executor_keeps_every_partition_and_byte(specs: list[tuple[str, int]]) -> None:
    parts = [StatePartition("q", i, e, size) for i, (e, size) in enumerate(specs)]
    loaded = loaded_by_executor(parts)
    assert sum(s.partitions for s in loaded.values()) == len(parts)
    assert sum(s.bytes or 0 for s in loaded.values()) == sum(size for _, size in specs)


def test_is_stateful_graph() -> None:
    assert is_stateful_graph('40 [label="StateStoreRDD [12]<br>start at ..."]')
    assert is_stateful_graph('label="StateStoreAwareZipPartitionsRDD [7]"')
    assert not is_stateful_graph('label="ShuffledRowRDD [3]<br>MapPartitionsRDD [4]"')


@pytest.mark.parametrize(
    ("placement", "executors", "expected"),
    [
        ({}, ["0", "1"], {}),
        ({0: "0", 1: "0"}, [], {}),
        # a scale-out from 1 to 2: the new executor takes the upper half, once
        ({p: "0" for p in range(8)}, ["0", "2"], {4: "2", 5: "2", 6: "2", 7: "2"}),
        # already even: nothing moves
        ({0: "0", 1: "1", 2: "0", 3: "1"}, ["0", "1"], {}),
        # odd count: the executor holding most keeps the larger quota
        ({0: "1", 1: "1", 2: "1", 3: "0", 4: "1"}, ["0", "1"], {4: "0"}),
        # 1 → 3 executors, 4 partitions: 2 stay, one to each new executor
        ({p: "0" for p in range(4)}, ["0", "1", "2"], {2: "1", 3: "2"}),
        # a lost executor's partitions are placed on the live ones
        ({0: "0", 1: "1", 2: "1"}, ["0"], {1: "0", 2: "0"}),
        ({0: "0", 1: "9", 2: "9", 3: "0"}, ["0", "1"], {1: "1", 2: "1"}),
        # numeric ids in numeric order: "10" after "9"
        ({p: "9" for p in range(3)}, ["9", "10"], {2: "10"}),
    ],
)
def test_spread_plan(
    placement: dict[int, str], executors: list[str], expected: dict[int, str]
) -> None:
    assert spread_plan(placement, executors) == expected


@given(
    st.dictionaries(st.integers(0, 40), st.sampled_from("01234"), max_size=40),
    st.sets(st.sampled_from("0123456"), min_size=1),
)
def test_spread_plan_evens_out_with_fewest_moves(placement: dict[int, str], live: set[str]) -> None:
    executors = sorted(live)
    moves = spread_plan(placement, executors)
    after = {**placement, **moves}
    counts = [sum(1 for e in after.values() if e == x) for x in executors]
    assert set(after.values()) <= live, "every partition ends on a live executor"
    assert max(counts) - min(counts) <= 1, "even"
    assert all(placement[p] != e for p, e in moves.items()), "a move changes the executor"
    n, k = len(placement), len(executors)
    held = sorted((sum(1 for e in placement.values() if e == x) for x in executors), reverse=True)
    quotas = [n // k + (1 if i < n % k else 0) for i in range(k)]
    kept = sum(min(h, q) for h, q in zip(held, quotas, strict=True))
    assert len(moves) == n - kept, "only what exceeds a quota (or was lost) moves"
    assert spread_plan(after, executors) == {}, "a second plan moves nothing"


@pytest.mark.parametrize(
    ("value", "seconds"),
    [("1s", 1.0), ("500ms", 0.5), ("0", 0.0), ("3000", 3.0), (" 2min ", 120.0), ("0s", 0.0)],
)
def test_spark_time_s(value: str, seconds: float) -> None:
    assert spark_time_s(value) == pytest.approx(seconds)


@pytest.mark.parametrize("value", ["1.5s", "1 sec", "s", "fast"])
def test_spark_time_s_refuses_what_spark_refuses(value: str) -> None:
    with pytest.raises(ValueError, match="Spark time"):
        spark_time_s(value)


@pytest.mark.parametrize(
    ("tasks", "span"),
    [
        ([], 0.0),
        ([TaskRecord(1, 0, "0", "RUNNING", 10.0)], 0.0),  # not done: not timed
        (
            [
                TaskRecord(1, 0, "0", "SUCCESS", 10.0, 0.5),
                TaskRecord(2, 1, "1", "SUCCESS", 10.2, 1.3),
                TaskRecord(3, 2, "0", "SUCCESS", 10.5, 0.4),
                TaskRecord(4, 3, "1", "FAILED", 9.0, 5.0),  # a failed attempt: left out
            ],
            1.5,
        ),
    ],
)
def test_stage_span_s(tasks: list[TaskRecord], span: float) -> None:
    assert stage_span_s(tasks) == pytest.approx(span)


@pytest.mark.parametrize(
    ("stages", "floor", "wait"),
    [
        ([], 1.0, 1.0),  # nothing read: the floor
        ([0.3, 0.6], 1.0, 1.0),  # an idle machine: the stage well under the floor
        ([2.6, 0.9], 1.0, 2.6),  # a busy one: the longest stage
        ([0.04], 0.0, 0.0),  # in tenths
        ([30.0], 1.0, 10.0),  # capped: what a stage waits at most for a lost executor
    ],
)
def test_locality_wait_s(stages: list[float], floor: float, wait: float) -> None:
    assert locality_wait_s(stages, floor) == pytest.approx(wait)


@given(st.lists(st.floats(0, 100)), st.floats(0, 5))
def test_locality_wait_s_is_within_floor_and_cap_and_grows_with_the_longest(
    stages: list[float], floor: float
) -> None:
    wait = locality_wait_s(stages, floor)
    assert round(floor, 1) <= wait <= max(10.0, round(floor, 1))
    assert locality_wait_s([*stages, 101.0], floor) >= wait
