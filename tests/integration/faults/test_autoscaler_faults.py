"""The autoscaler's cluster manager refusing or losing requests (issue 13): the controller
holds, retries, never goes below the minimum, and says so in its decision log.

The controller runs over a real lag tracker with a faulty :class:`FakeActuator` (a cluster
manager that refuses requests, or acknowledges them and does nothing), step by step on a
fake clock; then once over a real Spark application whose cluster manager (local mode)
refuses every executor request."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from streamscale.autoscale.actuator import FakeActuator, SparkActuator
from streamscale.autoscale.controller import Controller, DecisionRecord
from streamscale.autoscale.policy import PolicyConfig, PolicyKind, Reason
from streamscale.lag.model import BatchStats, LagTracker, PartitionOffsets, ProgressSample

pytestmark = [pytest.mark.integration, pytest.mark.faults]

MIN, MAX = 2, 4
GRANT_TIMEOUT_S = 30.0


class Clock:
    def __init__(self, t: float = 1_000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


class Run:
    """A controller (lag policy, 2-4 executors, no warm-up) stepped every 5 s of a fake clock,
    fed one micro-batch per step with the lag given."""

    def __init__(self, tmp_path: Path, actuator: Any, min_executors: int = MIN) -> None:
        self.clock = Clock()
        self.tracker = LagTracker()
        self.actuator = actuator
        self.log = tmp_path / "decisions.jsonl"
        self.batch = 0
        self.controller = Controller(
            "q",
            self.tracker,
            actuator,
            PolicyConfig(
                kind=PolicyKind.LAG,
                min_executors=min_executors,
                max_executors=MAX,
                lag_threshold=1_000.0,
                warmup_batches=0,
                stabilization_window_s=20.0,
            ),
            interval_s=5,
            decision_log=self.log,
            grant_timeout_s=GRANT_TIMEOUT_S,
            clock=self.clock,
        )

    def step(self, lag: int) -> DecisionRecord:
        self.clock.t += 5
        self.batch += 1
        done = 10_000 * self.batch
        parts = tuple(PartitionOffsets("in", p, done + lag // 4, done) for p in range(4))
        stats = BatchStats(self.batch, self.clock.t, 1_000, 1.0, 0.9)
        self.tracker.ingest(ProgressSample("q", self.clock.t, parts, stats))
        return self.controller.step()

    def logged(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in self.log.read_text().splitlines()]


def test_refused_and_lost_requests_are_held_retried_logged_never_below_the_minimum(
    tmp_path: Path,
) -> None:
    actuator = FakeActuator(current=MIN, max_executors=MAX)
    run = Run(tmp_path, actuator)
    backlog = 40_000

    # 1. Scale-up refused three times: each step says so, keeps its target, asks again.
    actuator.refuse = 3
    refused = [run.step(backlog) for _ in range(3)]
    assert [r.outcome for r in refused] == ["failed"] * 3
    assert all(r.desired == MAX and r.direction == "up" for r in refused)
    assert all(r.error and "refused" in r.error for r in refused)
    assert actuator.running() == MIN and run.controller.target == MIN
    granted = run.step(backlog)
    assert (granted.outcome, actuator.running(), run.controller.target) == ("applied", MAX, MAX)

    # 2. Caught up: the scale-down request is acknowledged and lost (nothing stops). The next
    #    step finds the executors still there: the target follows what runs (the policy holds
    #    through its stabilization window after the change it asked for), then the scale-down
    #    is asked again and sticks; never below the minimum.
    actuator.lose = 1
    steps = [run.step(0)]
    while actuator.running() > MIN and len(steps) < 20:
        steps.append(run.step(0))
    downs = [r for r in steps if r.direction == "down"]
    assert len(downs) == 2 and all(r.outcome == "applied" and r.desired == MIN for r in downs)
    assert downs[0].running == downs[1].running == MAX  # the first one was lost
    assert len(downs[1].killed) == MAX - MIN
    assert actuator.running() == MIN and all(r.desired >= MIN for r in steps)

    # 3. Scale-up acknowledged, never granted: pending, held while it may still come, then
    #    taken as lost after the grant timeout and asked again.
    actuator.lose = 1
    asked = run.step(backlog)
    while asked.direction != "up" and run.batch < 60:  # past the reversal hold
        asked = run.step(backlog)
    assert (asked.outcome, asked.desired, actuator.running()) == ("applied", MAX, MIN)
    waiting = [run.step(backlog) for _ in range(int(GRANT_TIMEOUT_S // 5))]
    assert all(r.pending == MAX - MIN for r in waiting[:-1])
    assert all(r.outcome == "held" for r in waiting[:-1])
    assert waiting[-1].outcome == "held"  # the deadline is only just reached
    again = run.step(backlog)
    assert (again.pending, again.outcome, actuator.running()) == (0, "applied", MAX)

    # 4. An executor crashes: below the minimum. The controller counts it as pending (the
    #    cluster manager replaces a crashed executor by itself) until the grant timeout, then
    #    asks for the minimum again; refused twice, it keeps asking until it is granted.
    for _ in range(8):
        run.step(0)
    assert actuator.running() == MIN
    actuator.current = MIN - 1  # an executor crashed
    actuator.refuse = 2
    replaced = [run.step(0)]
    while replaced[-1].outcome == "held" and len(replaced) < 10:
        replaced.append(run.step(0))
    assert all(r.pending == 1 for r in replaced[:-1])
    assert len(replaced) <= GRANT_TIMEOUT_S // 5 + 2
    replaced += [run.step(0) for _ in range(2)]
    assert [r.outcome for r in replaced[-3:]] == ["failed", "failed", "applied"]
    assert all(r.desired >= MIN for r in replaced)
    assert actuator.running() == MIN

    # The decision log says all of it, one JSON line per step.
    logged = run.logged()
    assert len(logged) == len(run.controller.records)
    failed = [d for d in logged if d["outcome"] == "failed"]
    assert len(failed) == 5 and all("refused" in d["error"] for d in failed)
    assert min(d["desired"] for d in logged) >= MIN
    assert any(d["pending"] == MAX - MIN and d["outcome"] == "held" for d in logged)
    assert [h for h in actuator.history if h < MIN] == []
    print(
        f"\ncluster manager faults: {len(logged)} decisions, {len(failed)} refused, "
        f"2 lost (one scale-down, one scale-up), history {actuator.history}"
    )


def test_a_real_cluster_manager_refusing_every_request(spark: Any, tmp_path: Path) -> None:
    """Local mode takes no executor request: the real actuator reports the refusal, the
    controller logs it as failed and asks again at the next step."""
    run = Run(tmp_path, SparkActuator(spark), min_executors=1)
    records = [run.step(40_000) for _ in range(3)]
    assert [r.outcome for r in records] == ["failed"] * 3
    assert all(r.error and "did not take the request" in r.error for r in records)
    assert all(r.desired >= 1 for r in records)
    assert [d["outcome"] for d in run.logged()] == ["failed"] * 3
    assert records[0].reason != Reason.HOLD_MISSING_METRICS
    print(f"\nlocal mode refuses: {records[0].error}")
