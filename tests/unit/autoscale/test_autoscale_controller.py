"""The controller over a real lag tracker and a fake actuator: no process is started."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from streamscale.autoscale import simulator
from streamscale.autoscale.actuator import FakeActuator
from streamscale.autoscale.controller import (
    Controller,
    QueryLimits,
    combined,
    observation,
    splits_for,
    with_limits,
)
from streamscale.autoscale.policy import PolicyConfig, PolicyKind, Reason
from streamscale.autoscale.state_placement import LoadedState
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
    clock = Clock()
    actuator = FakeActuator(current=1, max_executors=2, clock=clock)
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


def feed_batches(
    tracker: LagTracker, t0: float, sizes: list[int], first_id: int = 1, executors: int = 1
) -> float:
    """Batches of ``sizes`` records every 10 s from ``t0``, each taking 1 s + records / 250
    (fixed cost 1 s, 250 records/s on one executor); 400 records/s arrive over 4 partitions
    and the lag grows. Returns the time of the last one."""
    done = 0
    t = t0
    for i, size in enumerate(sizes, start=1):
        t = t0 + 10 * i
        done += size
        busy = 1.0 + size / (250 * executors)
        stats = BatchStats(first_id + i - 1, t, size, busy, busy - 0.5)
        ends = [1000 * i] * 4
        processed = [done // 4] * 4
        parts = tuple(
            PartitionOffsets("in", p, e, d)
            for p, (e, d) in enumerate(zip(ends, processed, strict=True))
        )
        tracker.ingest(ProgressSample("q", t, parts, stats))
    return t


def test_backlog_scales_out_then_back_in_after_the_window(tmp_path: Path) -> None:
    controller, tracker, actuator, clock = make(tmp_path)
    feed_batches(tracker, clock.t - 60, [500, 2000, 500, 2000, 500, 2000])
    record = controller.step()
    assert record.direction == "up"
    assert record.outcome == "applied"
    assert actuator.running() == 2
    assert controller.target == 2
    # the record carries the fitted capacity and the batches seen so far
    assert record.capacity_method == "fit"
    assert record.fixed_cost_s == pytest.approx(1.0)
    assert record.executor_rate == pytest.approx(250.0)
    assert [b[0] for b in record.batches] == [1, 2, 3, 4, 5, 6]
    assert record.batches[1] == (2, clock.t - 40 - 9.0, 9.0, 2000, 1)

    # caught up, and the input silent: the count is kept while the silence could be an outage
    # of the producers (catch_up_s, 300 s), then back to 1, once.
    directions = []
    for _ in range(1, 72):
        clock.t += 5
        feed(tracker, clock.t, [20_000] * 4, [20_000] * 4, 0, busy=0.1)
        step = controller.step()
        directions.append(step.direction)
        assert step.batches == ()  # no new batch: none logged twice
    assert directions.count("down") == 1
    assert "up" not in directions
    assert actuator.running() == 1

    lines = [json.loads(line) for line in (tmp_path / "decisions.jsonl").read_text().splitlines()]
    assert len(lines) == 72
    assert {
        "time",
        "query",
        "running",
        "desired",
        "reason",
        "outcome",
        "total_lag",
        "fixed_cost_s",
        "executor_rate",
        "capacity_method",
        "batches",
    } <= set(lines[0])
    decisions = tracker.decisions()
    assert decisions[("up", record.reason)] == 1
    assert tracker.executors()["q"] == {"target": 1, "running": 1}


def test_the_decision_log_calibrates_the_simulator(tmp_path: Path) -> None:
    """What the controller logs is what ``simulate --calibrate`` needs: the batches it fits
    give back the pipeline's fixed cost and rate."""
    controller, tracker, _, clock = make(tmp_path)
    feed_batches(tracker, clock.t - 60, [500, 2000, 500])
    controller.step()
    clock.t += 100
    assert controller.actuator.running() == 2  # the next batches run on 2 executors
    feed_batches(tracker, clock.t - 60, [400, 3000, 600], first_id=4, executors=2)
    controller.step()
    lines = [json.loads(line) for line in (tmp_path / "decisions.jsonl").read_text().splitlines()]
    calibration = simulator.calibrate(lines)
    assert calibration.batches == 6
    assert calibration.capacity.fixed_cost_s == pytest.approx(1.0)
    assert calibration.capacity.rate == pytest.approx(250.0)
    assert calibration.control_interval_s == pytest.approx(100.0)


def test_stale_metrics_hold(tmp_path: Path) -> None:
    controller, tracker, actuator, clock = make(tmp_path, max_metrics_age_s=10.0)
    feed(tracker, clock.t - 100, [50_000] * 4, [0] * 4, 1, busy=1.0)
    record = controller.step()
    assert record.reason == Reason.HOLD_STALE_METRICS
    assert actuator.history == []


def test_executors_that_never_come_release_the_hold(tmp_path: Path) -> None:
    controller, tracker, actuator, clock = make(
        tmp_path, kind=PolicyKind.LAG, lag_threshold=1000.0, warmup_batches=0
    )
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


def test_an_executor_lost_between_steps_is_in_the_log_even_once_replaced(
    tmp_path: Path,
) -> None:
    """The loss is recorded once, at the next step, whether or not the count there shows it
    (a replacement may register between two steps)."""
    controller, tracker, actuator, clock = make(tmp_path, kind=PolicyKind.LAG)
    feed(tracker, clock.t, [0] * 4, [0] * 4, 1, busy=1.0)
    assert controller.step().lost == ()
    actuator.lose_executor("Worker shutting down")
    actuator.current += 1  # replaced before the controller looks
    clock.t += 5
    record = controller.step()
    assert record.running == 1 and record.lost == (("0", "Worker shutting down"),)
    assert tracker.lost() == 1  # streamscale_executors_lost_total on /metrics
    clock.t += 5
    assert controller.step().lost == ()
    lines = [json.loads(line) for line in (tmp_path / "decisions.jsonl").read_text().splitlines()]
    assert [line["lost"] for line in lines] == [[], [["0", "Worker shutting down"]], []]


def test_failed_apply_is_logged_and_retried(tmp_path: Path) -> None:
    controller, tracker, actuator, clock = make(
        tmp_path, kind=PolicyKind.LAG, lag_threshold=1000.0, warmup_batches=0
    )
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


def test_the_decision_log_says_what_the_removed_executor_held(tmp_path: Path) -> None:
    controller, tracker, actuator, clock = make(tmp_path)
    controller.target, actuator.current = 2, 2
    actuator.state = {"0": LoadedState(2, 9000), "1": LoadedState(2, 1024)}
    feed(tracker, clock.t, [0] * 4, [0] * 4, 1, busy=0.5)
    applied = []
    for _ in range(8):
        clock.t += 5
        feed(tracker, clock.t, [0] * 4, [0] * 4, 0, busy=0.1)
        record = controller.step()
        if record.outcome == "applied":
            applied.append(record)
    assert [(r.killed, r.removed) for r in applied] == [(("1",), (("1", 0, 2, 1024),))]
    lines = [json.loads(line) for line in (tmp_path / "decisions.jsonl").read_text().splitlines()]
    assert [line["removed"] for line in lines if line["outcome"] == "applied"] == [
        [["1", 0, 2, 1024]]
    ]


def test_missing_metrics_do_not_shrink_the_partition_cap(tmp_path: Path) -> None:
    controller, _, actuator, _ = make(tmp_path)
    actuator.current = 2
    controller.target = 2
    record = controller.step()
    assert record.reason == Reason.HOLD_MISSING_METRICS and record.desired == 2
    assert actuator.running() == 2


def test_the_capacity_estimate_is_exported_on_metrics(tmp_path: Path) -> None:
    from prometheus_client import CollectorRegistry

    from streamscale.lag.metrics import LagCollector, render

    controller, tracker, _, clock = make(tmp_path)
    registry = CollectorRegistry()
    registry.register(LagCollector(tracker, clock=lambda: clock.t))
    controller.step()  # no batch yet: nothing known, nothing exported
    assert 'streamscale_executor_records_per_second{query="q"}' not in render(registry)
    feed_batches(tracker, clock.t - 60, [500, 2000, 500, 2000, 500, 2000])
    controller.step()
    text = render(registry)
    assert 'streamscale_batch_fixed_cost_seconds{query="q"} 1.0' in text
    assert 'streamscale_executor_records_per_second{query="q"} 250.0' in text


@pytest.mark.parametrize(
    ("partitions", "min_partitions", "splits"),
    [(4, None, 1), (4, 0, 1), (4, 4, 1), (4, 8, 2), (4, 10, 3), (1, 6, 6), (8, 2, 1)],
)
def test_splits_count_the_tasks_of_min_partitions(
    partitions: int, min_partitions: int | None, splits: int
) -> None:
    assert splits_for(partitions, min_partitions) == splits


def test_several_queries_are_one_need_their_sum(tmp_path: Path) -> None:
    tracker = LagTracker()
    for name, lag in (("a", 300), ("b", 700)):
        parts = (PartitionOffsets("in-" + name, 0, 1000 + lag, 1000),)
        tracker.ingest(ProgressSample(name, 100.0, parts, BatchStats(1, 100.0, 1000, 1.0, 0.9)))
    controller = Controller(
        None,
        tracker,
        FakeActuator(current=1, max_executors=4),
        PolicyConfig(max_executors=4),
        limits={"a": QueryLimits(min_partitions=4), "b": None}.get,
        clock=lambda: 101.0,
    )
    record = controller.step()
    assert record.query == "a,b"
    assert record.total_lag == 1000
    snaps = [tracker.snapshot(q, 101.0) for q in ("a", "b")]
    obs = combined(
        [
            observation(snaps[0], now=101.0, running=1, pending=0, splits_per_partition=4),
            observation(snaps[1], now=101.0, running=1, pending=0),
        ]
    )
    assert obs.partition_lag == (300, 700) and obs.partitions == 2
    assert obs.tasks >= 5, "the tasks of both queries (4 splits + 1) bound the parallelism"
    assert len(obs.batches) == 2


def test_one_query_without_metrics_holds_the_whole_application(tmp_path: Path) -> None:
    tracker = LagTracker()
    parts = (PartitionOffsets("in", 0, 5000, 0),)
    tracker.ingest(ProgressSample("a", 100.0, parts, BatchStats(1, 100.0, 10, 1.0, 0.9)))
    controller = Controller(
        ("a", "b"),
        tracker,
        FakeActuator(current=1, max_executors=4),
        PolicyConfig(),
        clock=lambda: 101.0,
    )
    assert controller.step().reason == Reason.HOLD_MISSING_METRICS


@pytest.mark.parametrize(
    ("limits", "trigger_s", "batch_limit"),
    [
        ([], 1.0, None),
        ([None], 1.0, None),
        ([QueryLimits(max_offsets_per_trigger=4000, trigger_interval_s=2.0)], 2.0, 4000),
        ([QueryLimits(trigger_interval_s=0.0)], 0.0, None),
        (
            [
                QueryLimits(max_offsets_per_trigger=4000, trigger_interval_s=2.0),
                QueryLimits(max_offsets_per_trigger=1000, trigger_interval_s=5.0),
            ],
            2.0,
            5000,
        ),
        ([QueryLimits(max_offsets_per_trigger=4000), QueryLimits()], 1.0, None),
        ([QueryLimits(max_offsets_per_trigger=4000, trigger_interval_s=2.0), None], 1.0, None),
    ],
)
def test_the_queries_own_trigger_and_batch_limit_size_the_capacity(
    limits: list[QueryLimits | None], trigger_s: float, batch_limit: int | None
) -> None:
    config = with_limits(PolicyConfig(trigger_interval_s=1.0), limits)
    assert (config.trigger_interval_s, config.max_records_per_trigger) == (trigger_s, batch_limit)


@pytest.mark.parametrize(
    ("delay_applies", "expected_start"),
    [
        # the pod's start, 25 s (an image pulled): slower than the configured 13 s, priced
        (4, 25.0),
        # granted within the request: the configured 13 s stays the floor
        (0, 0.0),
    ],
)
def test_a_scale_out_s_start_is_measured_and_priced_where_slower(
    tmp_path: Path, delay_applies: int, expected_start: float
) -> None:
    controller, tracker, actuator, clock = make(
        tmp_path, kind=PolicyKind.LAG, lag_threshold=1000.0, warmup_batches=0
    )
    actuator.delay_applies = delay_applies  # steps (5 s each) before the executor registers
    feed(tracker, clock.t, [50_000] * 4, [0] * 4, 1, busy=1.0)
    first = controller.step()
    assert (first.outcome, first.scale_up_delay_s, first.executor_start_s) == ("applied", 13, None)
    records = []
    for batch in range(2, 9):
        clock.t += 5
        feed(tracker, clock.t, [50_000] * 4, [0] * 4, batch, busy=1.0)
        records.append(controller.step())
    measured = [r.executor_start_s for r in records if r.executor_start_s is not None]
    assert measured == [expected_start], [r.executor_start_s for r in records]
    assert controller.starts == [expected_start]
    after = next(i for i, r in enumerate(records) if r.executor_start_s is not None)
    assert records[after].scale_up_delay_s == max(13.0, expected_start)
    assert records[-1].scale_up_delay_s == max(13.0, expected_start)
    # and ``simulate --calibrate`` takes the measured start from the log
    lines = [json.loads(line) for line in (tmp_path / "decisions.jsonl").read_text().splitlines()]
    assert simulator.calibrate(lines).start_delay_s == expected_start
