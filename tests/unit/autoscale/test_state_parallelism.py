"""The parallelism cap knows the stateful stage: source tasks bounded by state partitions."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from streamscale.autoscale.actuator import FakeActuator
from streamscale.autoscale.controller import Controller, combined, observation
from streamscale.autoscale.policy import Observation, PolicyConfig, decide, upper_bound
from streamscale.autoscale.policy import PolicyState as State
from streamscale.errors import ConfigError
from streamscale.lag.model import (
    BatchStats,
    LagTracker,
    PartitionOffsets,
    ProgressSample,
    StateOperatorStats,
)


def _obs(partitions: int, splits: int = 1, state: int | None = None) -> Observation:
    return Observation(
        now_s=0.0,
        executors=1,
        partitions=partitions,
        splits_per_partition=splits,
        state_partitions=state,
    )


@pytest.mark.parametrize(
    ("partitions", "splits", "state", "cores", "tasks", "bound", "usable"),
    [
        (4, 1, None, 1, 4, "source tasks", 4),  # stateless: the source's tasks
        (4, 1, 200, 1, 4, "source tasks", 4),  # Spark's default 200 state partitions
        (8, 1, 2, 1, 2, "state partitions", 2),  # two state partitions: two useful executors
        (4, 2, 6, 1, 6, "state partitions", 6),  # minPartitions splits, fewer state partitions
        (8, 1, 4, 2, 4, "state partitions", 2),  # two cores an executor
        (4, 1, 4, 1, 4, "source tasks", 4),  # equal: the source is named
    ],
)
def test_parallel_tasks_and_the_bound_that_holds(
    partitions: int, splits: int, state: int | None, cores: int, tasks: int, bound: str, usable: int
) -> None:
    o = _obs(partitions, splits, state)
    assert o.parallel_tasks == tasks
    assert o.parallelism_bound == bound
    config = PolicyConfig(min_executors=1, max_executors=16, executor_cores=cores)
    assert upper_bound(config, o) == usable


def test_state_partitions_below_one_are_refused() -> None:
    with pytest.raises(ConfigError, match="state_partitions"):
        _obs(4, state=0)


@given(
    st.integers(1, 64),
    st.integers(1, 4),
    st.integers(1, 400),
    st.integers(1, 32),
    st.integers(1, 4),
)
def test_a_stateful_stage_never_raises_the_cap(
    partitions: int, splits: int, state: int, max_executors: int, cores: int
) -> None:
    config = PolicyConfig(min_executors=1, max_executors=max_executors, executor_cores=cores)
    stateless, stateful = _obs(partitions, splits), _obs(partitions, splits, state)
    assert upper_bound(config, stateful) <= upper_bound(config, stateless)
    assert decide(config, State(), stateful)[0].desired <= upper_bound(config, stateful)


def test_combined_queries_add_each_query_own_parallel_tasks() -> None:
    both = combined([_obs(8, state=2), _obs(4)])
    assert both.tasks == 12 and both.parallel_tasks == 6
    assert combined([_obs(8), _obs(4)]).state_partitions is None


def _op(partitions: int) -> StateOperatorStats:
    return StateOperatorStats("stateStoreSave", partitions, 10, 1, 0, 100, 0.01, partitions)


def _feed(tracker: LagTracker, t: float, batch: int, state: tuple[StateOperatorStats, ...]) -> None:
    parts = tuple(PartitionOffsets("in", p, 10_000 + 100 * batch, 100 * batch) for p in range(8))
    stats = BatchStats(batch, t, 800, 1.0, 0.9)
    tracker.ingest(ProgressSample("q", t, parts, stats, state))


def test_the_decision_record_says_which_bound_held(tmp_path: Path) -> None:
    tracker = LagTracker()
    clock = [1_000.0]
    controller = Controller(
        "q",
        tracker,
        FakeActuator(current=1, max_executors=8),
        PolicyConfig(min_executors=1, max_executors=8),
        interval_s=5,
        decision_log=tmp_path / "d.jsonl",
        clock=lambda: clock[0],
    )
    for i in range(6):
        clock[0] += 5
        _feed(tracker, clock[0], i, (_op(3),))
    record = controller.step()
    assert record.parallelism == 3
    assert record.parallelism_bound == "state partitions (stateStoreSave: 3)"
    assert record.desired <= 3  # a backlog of 80,000 records, but three useful executors
    assert '"parallelism_bound":"state partitions (stateStoreSave: 3)"' in (
        (tmp_path / "d.jsonl").read_text()
    )


def test_a_metrics_outage_keeps_the_last_state_partitions() -> None:
    o = observation(
        None, now=0.0, running=1, pending=0, known_partitions=8, known_state_partitions=2
    )
    assert o.parallel_tasks == 2 and o.parallelism_bound == "state partitions"
