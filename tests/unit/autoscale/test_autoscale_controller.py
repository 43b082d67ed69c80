"""The controller over a real lag tracker and a fake actuator: no process is started."""

from __future__ import annotations

import json
from pathlib import Path

from streamscale.autoscale.actuator import FakeActuator
from streamscale.autoscale.controller import Controller, observation
from streamscale.autoscale.policy import PolicyConfig, PolicyKind, Reason
from streamscale.lag.model import BatchStats, LagTracker, PartitionOffsets, ProgressSample


class Clock:
    def __init__(self, t: float = 1_000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def feed(
    tracker: LagTracker, t: float, ends: list[int], done: list[int], batch: int, busy: float
) -> None:
    parts = tuple(
        PartitionOffsets("in", p, e, d) for p, (e, d) in enumerate(zip(ends, done, strict=True))
    )
    records = batch and sum(done) // max(1, batch)
    stats = BatchStats(batch, t, records, busy, busy * 0.9) if batch else None
    tracker.ingest(ProgressSample("q", t, parts, stats))


def make(tmp_path: Path, **config: object) -> tuple[Controller, LagTracker, FakeActuator, Clock]:
    tracker = LagTracker()
    actuator = FakeActuator(current=1, max_executors=2)
    clock = Clock()
    policy = PolicyConfig(
        **{"min_executors": 1, "max_executors": 2, "stabilization_window_s": 30.0, **config}  # type: ignore[arg-type]
    )
    controller = Controller(
        "q",
        tracker,
        actuator,
        policy,
        interval_s=5,
        decision_log=tmp_path / "decisions.jsonl",
        clock=clock,
    )
    return controller, tracker, actuator, clock


def test_no_metrics_holds_and_never_reads_zero_lag(tmp_path: Path) -> None:
    controller, _, actuator, _ = make(tmp_path)
    record = controller.step()
    assert record.reason == Reason.HOLD_MISSING_METRICS
    assert record.outcome == "held"
    assert actuator.history == []


def test_backlog_scales_out_then_back_in_after_the_window(tmp_path: Path) -> None:
    controller, tracker, actuator, clock = make(tmp_path)
    # 4 partitions, 1000 rec/s arriving, processed at 500 rec/s per busy second: falling behind.
    t = clock.t
    for i in range(1, 6):
        ends = [i * 1000] * 4
        done = [i * 500] * 4
        feed(tracker, t - 50 + i * 10, ends, done, i, busy=4.0)
    record = controller.step()
    assert record.direction == "up"
    assert record.outcome == "applied"
    assert actuator.running() == 2
    assert controller.target == 2

    # caught up: lag 0 for longer than the window → back to 1, once.
    directions = []
    for _ in range(1, 12):
        clock.t += 5
        feed(tracker, clock.t, [20_000] * 4, [20_000] * 4, 0, busy=0.1)
        directions.append(controller.step().direction)
    assert directions.count("down") == 1
    assert "up" not in directions
    assert actuator.running() == 1

    lines = [json.loads(line) for line in (tmp_path / "decisions.jsonl").read_text().splitlines()]
    assert len(lines) == 12
    assert {"time", "query", "running", "desired", "reason", "outcome", "total_lag"} <= set(
        lines[0]
    )
    decisions = tracker.decisions()
    assert decisions[("up", record.reason)] == 1
    assert tracker.executors()["q"] == {"target": 1, "running": 1}


def test_stale_metrics_hold(tmp_path: Path) -> None:
    controller, tracker, actuator, clock = make(tmp_path, max_metrics_age_s=10.0)
    feed(tracker, clock.t - 100, [50_000] * 4, [0] * 4, 1, busy=1.0)
    record = controller.step()
    assert record.reason == Reason.HOLD_STALE_METRICS
    assert actuator.history == []


def test_executors_that_never_come_release_the_hold(tmp_path: Path) -> None:
    controller, tracker, actuator, clock = make(tmp_path, kind=PolicyKind.LAG, lag_threshold=1000.0)
    actuator.delay_applies = 10_000  # granted never
    feed(tracker, clock.t, [50_000] * 4, [0] * 4, 1, busy=1.0)
    assert controller.step().outcome == "applied"
    clock.t += 5
    feed(tracker, clock.t, [50_000] * 4, [0] * 4, 2, busy=1.0)
    assert controller.step().reason == Reason.HOLD_SCALING_IN_PROGRESS
    clock.t += 120
    feed(tracker, clock.t, [50_000] * 4, [0] * 4, 3, busy=1.0)
    record = controller.step()
    assert record.pending == 0
    assert record.outcome == "applied"  # asks again instead of waiting forever


def test_failed_apply_is_logged_and_retried(tmp_path: Path) -> None:
    controller, tracker, actuator, clock = make(tmp_path, kind=PolicyKind.LAG, lag_threshold=1000.0)
    actuator.fail = True
    feed(tracker, clock.t, [50_000] * 4, [0] * 4, 1, busy=1.0)
    record = controller.step()
    assert record.outcome == "failed" and record.error == "fake failure"
    actuator.fail = False
    clock.t += 5
    feed(tracker, clock.t, [50_000] * 4, [0] * 4, 2, busy=1.0)
    assert controller.step().outcome == "applied"


def test_observation_maps_snapshot_fields() -> None:
    tracker = LagTracker()
    feed(tracker, 100.0, [10, 20], [5, 20], 1, busy=2.0)
    snap = tracker.snapshot("q", 101.0)
    obs = observation(snap, now=101.0, running=1, pending=0, batch_executors={1: 2})
    assert obs.partition_lag == (5, 0)
    assert obs.partitions == 2
    assert obs.metrics_age_s == 1.0
    assert obs.batches[0].executors == 2
    empty = observation(None, now=1.0, running=1, pending=0)
    assert empty.metrics_age_s is None and empty.partition_lag == ()


def test_background_loop_starts_and_stops(tmp_path: Path) -> None:
    tracker = LagTracker()
    controller = Controller("q", tracker, FakeActuator(), PolicyConfig(), interval_s=0.01)
    with controller:
        import time

        deadline = time.monotonic() + 5
        while len(controller.records) < 3 and time.monotonic() < deadline:
            time.sleep(0.01)
    assert len(controller.records) >= 3
    assert controller._thread is None


def test_surplus_executors_are_removed_even_when_the_target_is_already_met(tmp_path: Path) -> None:
    controller, tracker, actuator, clock = make(tmp_path)
    controller.target = 1  # asked for 1 at start, but the cluster had granted 2 already
    actuator.current = 2
    record = controller.step()  # no metrics yet: the policy holds at 2...
    assert record.reason == Reason.HOLD_MISSING_METRICS
    assert record.desired == 2
    feed(tracker, clock.t, [0] * 4, [0] * 4, 1, busy=0.5)
    for _ in range(8):
        clock.t += 5
        feed(tracker, clock.t, [0] * 4, [0] * 4, 0, busy=0.1)
        controller.step()
    assert actuator.running() == 1


def test_missing_metrics_do_not_shrink_the_partition_cap(tmp_path: Path) -> None:
    controller, _, actuator, _ = make(tmp_path)
    actuator.current = 2
    controller.target = 2
    record = controller.step()
    assert record.reason == Reason.HOLD_MISSING_METRICS and record.desired == 2
    assert actuator.running() == 2
