"""The actuator's pure parts: which executors to kill, bounds, and the fake for controller tests.

(Named apart from ``tests/integration/autoscale/test_actuator.py``: test modules share one
namespace in pytest's default import mode.)
"""

from __future__ import annotations

from collections.abc import Mapping
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from streamscale.autoscale.actuator import (
    Actuator,
    ApplyResult,
    ExecutorState,
    FakeActuator,
    Lost,
    Removed,
    SparkActuator,
    choose_victims,
    clamp,
    describe_removed,
    initial_executors,
    max_executors_from_conf,
    newly_lost,
)
from streamscale.autoscale.state_placement import LoadedState
from streamscale.errors import ConfigError


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


def held(partitions: int, size: int | None) -> LoadedState:
    return LoadedState(partitions, size)


@pytest.mark.parametrize(
    ("executors", "state", "count", "expected"),
    [
        # both idle, the older holds less: it goes, where newest-first would keep it
        ([ex("0"), ex("1")], {"0": held(2, 800), "1": held(2, 6000)}, 1, ["0"]),
        # an executor absent from the state holds nothing: it goes first
        ([ex("0"), ex("1"), ex("2")], {"0": held(1, 10), "2": held(1, 10)}, 1, ["1"]),
        # equal bytes: fewer partitions goes
        ([ex("0"), ex("1")], {"0": held(1, 100), "1": held(3, 100)}, 1, ["0"]),
        # equal bytes and partitions: newest goes
        ([ex("0"), ex("1")], {"0": held(2, 100), "1": held(2, 100)}, 1, ["1"]),
        # busy-ness first: the idle one goes even with more state
        ([ex("0", 1), ex("1")], {"0": held(0, 0), "1": held(4, 9000)}, 1, ["1"]),
        # two to remove: the two cheapest, cheapest first
        (
            [ex("0"), ex("1"), ex("2")],
            {"0": held(2, 50), "1": held(2, 5000), "2": held(2, 500)},
            2,
            ["0", "2"],
        ),
        # a size unknown: sizes are ignored, partitions decide
        ([ex("0"), ex("1")], {"0": held(3, None), "1": held(1, 9000)}, 1, ["1"]),
        ([ex("0"), ex("1")], {"0": held(1, None), "1": held(3, 10)}, 1, ["0"]),
        # no state information: newest idle first, as before
        ([ex("0"), ex("1"), ex("2", 1)], {}, 1, ["1"]),
        ([ex("0"), ex("1"), ex("2", 1)], None, 2, ["1", "0"]),
    ],
)
def test_choose_victims_by_state(
    executors: list[ExecutorState],
    state: dict[str, LoadedState] | None,
    count: int,
    expected: list[str],
) -> None:
    assert [e.id for e in choose_victims(executors, count, state)] == expected


executor_sets = st.lists(
    st.tuples(st.integers(0, 2), st.integers(0, 4), st.integers(0, 10_000)),
    min_size=1,
    max_size=8,
)


@given(executor_sets, st.integers(0, 9))
def test_a_victim_never_holds_more_than_a_kept_executor_as_busy(
    specs: list[tuple[int, int, int]], count: int
) -> None:
    executors = [ex(str(i), active) for i, (active, _, _) in enumerate(specs)]
    state = {str(i): held(parts, size) for i, (_, parts, size) in enumerate(specs)}
    victims = choose_victims(executors, count, state)
    assert len(victims) == min(count, len(executors))
    kept = [e for e in executors if e not in victims]
    for v in victims:
        for k in kept:
            assert v.active_tasks <= k.active_tasks, "a busier executor went before"
            if v.active_tasks == k.active_tasks:
                size_v, size_k = state[v.id].bytes or 0, state[k.id].bytes or 0
                assert size_v <= size_k
                if size_v == size_k:
                    assert state[v.id].partitions <= state[k.id].partitions


@given(st.lists(st.integers(0, 2), min_size=1, max_size=8), st.integers(0, 9))
def test_without_state_the_choice_is_as_before(actives: list[int], count: int) -> None:
    executors = [ex(str(i), a) for i, a in enumerate(actives)]
    before = sorted(executors, key=lambda e: (e.active_tasks, -int(e.id)))[:count]
    assert choose_victims(executors, count) == before
    assert choose_victims(executors, count, {}) == before
    assert choose_victims(executors, count, {e.id: LoadedState() for e in executors}) == before


def test_describe_removed() -> None:
    assert describe_removed(*Removed("1", 0, 2, 6211).as_tuple()) == (
        "removed executor 1 (2 state partitions, 6211 B)"
    )
    assert describe_removed("3", 2, 1, None) == (
        "removed executor 3 (2 tasks, 1 state partitions, size unknown)"
    )


class _Stub:
    """Just enough of a SparkSession for the actuator's constructor."""

    def __init__(self) -> None:
        conf = SimpleNamespace(getAll=lambda: [("spark.cores.max", "3")])
        jsc = SimpleNamespace(sc=lambda: None)
        self.sparkContext = SimpleNamespace(_jsc=jsc, getConf=lambda: conf)


class _OfflineActuator(SparkActuator):
    """The Spark actuator with its py4j calls replaced: three executors, all idle."""

    def __init__(self, reader: Any) -> None:
        super().__init__(_Stub(), state_reader=reader)  # type: ignore[arg-type]
        self.kills: list[list[str]] = []

    def executors(self) -> list[ExecutorState]:
        return [ex("0"), ex("1"), ex("2")]

    def _kill(self, ids: list[str]) -> bool:
        self.kills.append(ids)
        return True

    def _request_total(self, total: int) -> bool:
        return True


def test_spark_actuator_removes_the_executor_holding_least_state() -> None:
    reads: list[int] = []

    def reader() -> dict[str, LoadedState]:
        reads.append(1)
        return {"0": held(1, 100), "1": held(2, 40), "2": held(3, 9000)}

    actuator = _OfflineActuator(reader)
    assert actuator.apply(3).killed == () and reads == [], "no scale-in, no read"
    result = actuator.apply(2)
    assert result.ok and result.killed == ("1",) and actuator.kills == [["1"]]
    assert result.removed == (Removed("1", 0, 2, 40),)


class _ScalingActuator(_OfflineActuator):
    """The offline actuator whose executors follow the requested total (``registered``
    of them are up), with a recording spreader."""

    def __init__(self, moves: list[dict[str, dict[int, str]]]) -> None:
        self.moves = moves
        self.calls: list[dict[str, str]] = []
        SparkActuator.__init__(
            self,
            _Stub(),  # type: ignore[arg-type]
            state_reader=dict,
            spreader=self._spread,
            spread_attempts=3,
        )
        self.kills = []
        self.registered = 1

    def _spread(self, hosts: Mapping[str, str]) -> dict[str, dict[int, str]]:
        self.calls.append(dict(hosts))
        return self.moves.pop(0) if self.moves else {}

    def executor_ids(self, *, include_removing: bool = False) -> list[str]:
        return [str(i) for i in range(self.registered)]

    def executors(self) -> list[ExecutorState]:
        return [ExecutorState(i, f"127.0.0.1:{4000 + int(i)}") for i in self.executor_ids()]


def test_a_scale_out_spreads_state_once_the_added_executor_registers() -> None:
    actuator = _ScalingActuator([{"q": {4: "1"}}, {"q": {}}])
    assert actuator.running() == 1 and actuator.calls == [], "nothing due before a scale-out"
    assert actuator.apply(2).direction == "up"
    assert actuator.running() == 1 and actuator.calls == [], "waits for the added executor"
    actuator.registered = 2
    actuator.running()
    assert actuator.calls == [{"0": "127.0.0.1", "1": "127.0.0.1"}]
    actuator.running()  # moved something: checked again
    actuator.running()  # moved nothing: done
    assert len(actuator.calls) == 2 and actuator.spreads == [{"q": {4: "1"}}, {"q": {}}]


def test_a_spread_is_checked_again_only_once_the_batch_running_at_its_move_has_reported() -> None:
    """A batch running at the move may load a moved partition where it was and report it
    back there, and until it is done the placement read is the one before the move."""
    actuator = _ScalingActuator([{"q": {7: "1"}}, {"q": {7: "1"}}, {}])
    query = SimpleNamespace(runId="q", lastProgress={"batchId": 10, "stateOperators": [{}]})
    actuator._spark = SimpleNamespace(streams=SimpleNamespace(active=[query]))  # type: ignore[assignment]
    actuator.apply(2)
    actuator.registered = 2
    actuator.running()  # moves 7 while batch 11 runs
    actuator.running()
    assert len(actuator.calls) == 1 and actuator._spread_due == 2, "waits for batch 11"
    query.lastProgress = {"batchId": 11, "stateOperators": [{}]}
    actuator.running()  # batch 11 reported 7 back where it loaded it: moved again
    actuator.running()
    assert len(actuator.calls) == 2, "waits for batch 12"
    query.lastProgress = {"batchId": 12, "stateOperators": [{}]}
    actuator.running()  # nothing to move: done
    actuator.running()
    assert len(actuator.calls) == 3 and actuator._spread_due is None


def test_a_spread_gives_up_after_its_attempts_and_a_scale_in_cancels_it() -> None:
    actuator = _ScalingActuator([{"q": {1: "1"}}] * 5)
    actuator.apply(2)
    actuator.registered = 2
    for _ in range(5):
        actuator.running()
    assert len(actuator.calls) == 3, "at most spread_attempts"
    actuator.registered = 1
    actuator.apply(3)
    actuator.apply(1)
    actuator.registered = 3
    actuator.running()
    assert len(actuator.calls) == 3, "a scale-in cancels a due spread"


def test_a_failed_spread_is_an_attempt_and_not_an_error() -> None:
    def broken(hosts: Mapping[str, str]) -> dict[str, dict[int, str]]:
        raise RuntimeError("py4j: gone")

    actuator = _ScalingActuator([])
    actuator._spreader = broken
    actuator.apply(2)
    actuator.registered = 2
    assert actuator.running() == 2 and actuator.spreads == [{}]


def test_a_scale_in_gives_the_removed_partitions_to_the_executors_kept() -> None:
    actuator = _ScalingActuator([{"q": {1: "0"}}])
    actuator._state_reader = lambda: {"0": held(1, 100), "1": held(1, 40)}
    actuator.registered = 2
    result = actuator.apply(1)
    assert result.killed == ("1",)
    assert actuator.calls == [{"0": "127.0.0.1"}], "spread over the executor kept"
    assert actuator.spreads == [{"q": {1: "0"}}]


def test_a_scale_in_of_stateless_executors_spreads_nothing() -> None:
    actuator = _ScalingActuator([])
    actuator.registered = 2
    assert actuator.apply(1).killed == ("1",) and actuator.calls == []


class _ConfRecorder:
    def __init__(self) -> None:
        self.set_calls: list[tuple[str, str]] = []

    def set(self, key: str, value: str) -> None:
        self.set_calls.append((key, value))


def _session(conf: dict[str, str], progress: dict[str, Any] | None) -> tuple[Any, _ConfRecorder]:
    """A stub session with one query whose last progress is ``progress``."""
    recorder = _ConfRecorder()
    context = SimpleNamespace(
        getConf=lambda: SimpleNamespace(getAll=lambda: list(conf.items())),
        _jsc=SimpleNamespace(sc=lambda: SimpleNamespace(conf=lambda: recorder)),
    )
    query = SimpleNamespace(lastProgress=progress)
    return SimpleNamespace(sparkContext=context, streams=SimpleNamespace(active=[query])), recorder


@pytest.mark.parametrize(
    ("conf", "progress", "wait", "expected"),
    [
        # a stateful query runs: its partitions wait 1 s for their executor
        ({}, {"stateOperators": [{}]}, "1s", [("spark.locality.wait.process", "1s")]),
        ({}, {"stateOperators": []}, "1s", []),  # stateless: Kafka tasks never wait
        ({}, None, "1s", []),  # no batch yet
        ({"spark.locality.wait.process": "0s"}, {"stateOperators": [{}]}, "1s", []),  # the user's
        ({}, {"stateOperators": [{}]}, None, []),  # turned off
    ],
)
def test_the_process_locality_wait_is_set_once_a_stateful_query_runs(
    conf: dict[str, str],
    progress: dict[str, Any] | None,
    wait: str | None,
    expected: list[tuple[str, str]],
) -> None:
    spark, recorder = _session(conf, progress)
    actuator = SparkActuator(
        spark, state_reader=dict, spreader=lambda hosts: {}, process_locality_wait=wait
    )
    actuator.executor_ids = lambda **_: ["0"]  # type: ignore[method-assign]
    actuator.running()
    actuator.running()
    assert recorder.set_calls == expected


def test_the_wait_follows_the_stateful_stage_after_each_new_batch() -> None:
    spark, recorder = _session({}, {"batchId": 3, "stateOperators": [{}]})
    query = spark.streams.active[0]
    query.runId = "q"
    stages = [0.4]
    reads: list[int] = []

    def stage_seconds() -> list[float]:
        reads.append(1)
        return list(stages)

    actuator = SparkActuator(
        spark,
        state_reader=dict,
        spreader=lambda hosts: {},
        stage_seconds=stage_seconds,
        adapt_every_s=0,
    )
    actuator.executor_ids = lambda **_: ["0"]  # type: ignore[method-assign]
    key = "spark.locality.wait.process"
    actuator.running()  # set at its floor; the stage under it: left there
    assert recorder.set_calls == [(key, "1s")] and len(reads) == 1
    stages[:] = [3.2, 0.5]  # the machine got busy
    actuator.running()
    assert len(reads) == 1, "read once a batch"
    query.lastProgress = {"batchId": 4, "stateOperators": [{}]}
    actuator.running()
    assert recorder.set_calls[-1] == (key, "3200ms")
    stages[:] = [0.3]
    query.lastProgress = {"batchId": 5, "stateOperators": [{}]}
    actuator.running()
    assert recorder.set_calls[-1] == (key, "1000ms") and len(recorder.set_calls) == 3


def test_a_process_locality_wait_spark_cannot_read_is_a_config_error() -> None:
    spark, _ = _session({}, None)
    with pytest.raises(ConfigError, match="process_locality_wait"):
        SparkActuator(spark, state_reader=dict, process_locality_wait="1.5s")


def test_a_scale_in_lifts_the_wait_until_the_victims_are_gone() -> None:
    spark, recorder = _session({}, {"stateOperators": [{}]})
    ids = ["0", "1"]

    class Offline(SparkActuator):
        def executor_ids(self, *, include_removing: bool = False) -> list[str]:
            return list(ids)

        def executors(self) -> list[ExecutorState]:
            return [ex(i) for i in ids]

        def _kill(self, victims: list[str]) -> bool:
            return True

        def _request_total(self, total: int) -> bool:
            return True

    actuator = Offline(spark, state_reader=dict, spreader=lambda hosts: {}, restore_wait_s=0)
    actuator.running()
    assert actuator.apply(1).killed == ("1",)
    actuator.running()  # the victim still registered: no wait yet
    ids.remove("1")
    actuator.running()
    actuator.running()
    key = "spark.locality.wait.process"
    assert recorder.set_calls == [(key, "1s"), (key, "0s"), (key, "1s")]


def test_spark_actuator_without_a_readable_state_removes_the_newest_idle() -> None:
    def broken() -> dict[str, LoadedState]:
        raise RuntimeError("py4j: connection refused")

    result = _OfflineActuator(broken).apply(2)
    assert result.ok and result.killed == ("2",)
    assert result.removed == (Removed("2", 0, 0, 0),)


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
    standalone = {**conf, "spark.master": "spark://10.0.0.1:7077"}
    assert max_executors_from_conf(standalone) == expected


@pytest.mark.parametrize("master", ["k8s://https://kubernetes.default.svc", "yarn"])
def test_cores_max_bounds_nothing_on_kubernetes(master: str) -> None:
    conf = {"spark.master": master, "spark.cores.max": "2", "spark.executor.cores": "1"}
    assert max_executors_from_conf(conf) is None


K8S = "k8s://https://kubernetes.default.svc:443"


@pytest.mark.parametrize(
    ("conf", "max_executors", "expected"),
    [
        # Kubernetes starts spark.executor.instances pods (Spark's default: 2)
        ({"spark.master": K8S, "spark.executor.instances": "1"}, 8, 1),
        ({"spark.master": K8S, "spark.executor.instances": "3"}, 8, 3),
        ({"spark.master": K8S}, 8, 2),
        ({"spark.master": K8S, "spark.executor.instances": "x"}, 8, 2),
        ({"spark.master": K8S, "spark.cores.max": "6"}, 8, 2),  # cores.max: standalone only
        ({"spark.master": "yarn", "spark.executor.instances": "4"}, 8, 4),
        # standalone grants spark.cores.max / spark.executor.cores, instances ignored
        ({"spark.master": "spark://h:7077", "spark.cores.max": "3"}, 8, 3),
        ({"spark.master": "spark://h:7077", "spark.executor.instances": "1"}, 8, 8),
        ({"spark.cores.max": "4", "spark.executor.cores": "2"}, 8, 2),
    ],
)
def test_initial_executors(conf: dict[str, str], max_executors: int, expected: int) -> None:
    assert initial_executors(conf, max_executors) == expected


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


def _gone(reasons: dict[str, str]) -> dict[str, Lost]:
    return {i: Lost(i, reason, 100.0) for i, reason in reasons.items()}


@pytest.mark.parametrize(
    ("removed", "reported", "killed", "expected"),
    [
        ({}, set(), set(), ()),
        ({"2": "worker lost"}, set(), set(), (Lost("2", "worker lost", 100.0),)),
        ({"2": "worker lost"}, {"2"}, set(), ()),  # each once
        ({"2": "Executor killed by driver."}, set(), {"2"}, ()),  # the autoscaler's own
        (
            {"10": "a", "9": "b", "x": ""},
            set(),
            set(),
            (Lost("9", "b", 100.0), Lost("10", "a", 100.0), Lost("x", "", 100.0)),
        ),
    ],
)
def test_newly_lost(
    removed: dict[str, str], reported: set[str], killed: set[str], expected: tuple[Lost, ...]
) -> None:
    assert newly_lost(_gone(removed), reported, killed) == expected


class _LosingActuator(_OfflineActuator):
    """The offline actuator with a status store of removed executors set by the test."""

    def __init__(self) -> None:
        super().__init__(dict)
        self.gone: dict[str, str] = {}

    def removed_executors(self) -> dict[str, Lost]:
        return _gone(self.gone)


def test_spark_actuator_reports_executors_it_did_not_kill_once() -> None:
    actuator = _LosingActuator()
    actuator.gone = {"7": "lost before the autoscaler started"}
    assert actuator.lost() == (), "the first read only learns the past"
    actuator.apply(2)  # kills one of the three
    (victim,) = actuator.kills[0]
    actuator.gone |= {victim: "Executor killed by driver.", "0": "Worker shutting down"}
    assert actuator.lost() == (Lost("0", "Worker shutting down", 100.0),)
    assert actuator.lost() == ()
