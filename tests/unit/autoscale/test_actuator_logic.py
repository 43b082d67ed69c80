"""The actuator's pure parts: which executors to kill, bounds, and the fake for controller tests.

(Named apart from ``tests/integration/autoscale/test_actuator.py``: test modules share one
namespace in pytest's default import mode.)
"""

from __future__ import annotations

import pytest

from streamscale.autoscale.actuator import (
    Actuator,
    ApplyResult,
    ExecutorState,
    FakeActuator,
    choose_victims,
    clamp,
    max_executors_from_conf,
)


def ex(executor_id: str, active: int = 0) -> ExecutorState:
    return ExecutorState(executor_id, active_tasks=active)


@pytest.mark.parametrize(
    ("executors", "count", "expected"),
    [
        ([ex("0"), ex("1")], 0, []),
        ([ex("0"), ex("1")], -1, []),
        ([ex("0"), ex("1")], 1, ["1"]),  # both idle: the newest goes
        ([ex("0"), ex("1", active=1)], 1, ["0"]),  # the idle one goes, even if older
        ([ex("0", 2), ex("1", 1), ex("2", 3)], 2, ["1", "0"]),  # least busy first
        ([ex("2"), ex("10")], 1, ["10"]),  # ids compare as numbers
        ([ex("0")], 3, ["0"]),  # never more than exist
    ],
)
def test_choose_victims(executors: list[ExecutorState], count: int, expected: list[str]) -> None:
    assert [e.id for e in choose_victims(executors, count)] == expected


@pytest.mark.parametrize(
    ("target", "ceiling", "expected"), [(3, None, 3), (3, 2, 2), (-1, 2, 0), (0, None, 0)]
)
def test_clamp(target: int, ceiling: int | None, expected: int) -> None:
    assert clamp(target, ceiling) == expected


@pytest.mark.parametrize(
    ("conf", "expected"),
    [
        ({}, None),
        ({"spark.cores.max": "2"}, 2),
        ({"spark.cores.max": "4", "spark.executor.cores": "2"}, 2),
        ({"spark.cores.max": "3", "spark.executor.cores": "2"}, 1),
    ],
)
def test_max_executors_from_conf(conf: dict[str, str], expected: int | None) -> None:
    assert max_executors_from_conf(conf) == expected


def test_apply_result_direction() -> None:
    assert ApplyResult(2, 2, 1).direction == "up"
    assert ApplyResult(1, 1, 2, ("1",)).direction == "down"
    assert ApplyResult(1, 1, 1).direction == "none"
    assert not ApplyResult(1, 1, 1, acknowledged=False).ok


def test_fake_is_an_actuator() -> None:
    assert isinstance(FakeActuator(), Actuator)


def test_fake_follows_target_at_once_within_bounds() -> None:
    fake = FakeActuator(current=1, max_executors=3)
    result = fake.apply(5)
    assert (result.target, result.before, result.direction) == (3, 1, "up")
    assert fake.running() == 3
    down = fake.apply(1)
    assert down.killed == ("1", "2")
    assert fake.running() == 1
    assert fake.history == [3, 1]


def test_fake_with_delay_changes_after_some_reads() -> None:
    fake = FakeActuator(current=1, delay_applies=2)
    fake.apply(2)
    assert [fake.running() for _ in range(4)] == [1, 1, 2, 2]


def test_fake_failure_changes_nothing() -> None:
    fake = FakeActuator(current=2, fail=True)
    result = fake.apply(4)
    assert not result.ok
    assert fake.running() == 2
