"""The controller: every interval, lag signals → policy → actuator, and a decision log.

It runs in the driver next to the query (a daemon thread), reads the lag model's snapshot of
one query (no Kafka round trip), turns it into the policy's :class:`Observation`, calls the
same :func:`~streamscale.autoscale.policy.decide` the simulator uses, applies the result through
an :class:`~streamscale.autoscale.actuator.Actuator`, and records every decision — holds
included — as one JSON line and in the metrics (``streamscale_executors{state}``,
``streamscale_scaling_decisions_total{direction,reason}``, and the capacity estimate as
``streamscale_batch_fixed_cost_seconds`` and ``streamscale_executor_records_per_second``).

Each record carries the capacity estimate of its step (fixed cost per batch, records/s per
executor, and how they were obtained) and the micro-batches completed since the previous
record, so that ``streamscale simulate --calibrate`` can fit the simulator to a real run.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import IO, Any, Protocol

from streamscale.autoscale.actuator import Actuator, ApplyResult
from streamscale.autoscale.policy import (
    BatchSample,
    Decision,
    Observation,
    PolicyConfig,
    PolicyState,
    decide,
)

log = logging.getLogger(__name__)

DIRECTIONS = {1: "up", -1: "down", 0: "none"}


class SnapshotSource(Protocol):
    """What the controller needs of the lag model (``streamscale.lag.model.LagTracker``)."""

    def snapshot(self, query: str, now: float) -> Any: ...

    def set_executors(
        self, query: str, *, target: int | None = None, running: int | None = None
    ) -> None: ...

    def set_capacity(
        self, query: str, *, fixed_cost_s: float | None, executor_rate: float | None
    ) -> None: ...

    def count_decision(self, direction: str, reason: str, n: int = 1) -> None: ...


@dataclass(frozen=True)
class DecisionRecord:
    """One control step, as written to the decision log."""

    time: float
    query: str
    running: int
    pending: int
    desired: int
    reason: str
    direction: str
    outcome: str
    """held | applied | failed."""
    total_lag: int | None = None
    max_time_lag_s: float | None = None
    input_rate: float | None = None
    processed_rate: float | None = None
    fixed_cost_s: float | None = None
    """Fitted fixed cost of one micro-batch (seconds)."""
    executor_rate: float | None = None
    """Fitted records/s of one executor, net of the fixed cost."""
    capacity_method: str | None = None
    """fit | remembered | lower_bound | unknown (see ``capacity.CapacityMethod``)."""
    capacity_note: str | None = None
    """Why the capacity is what it is (e.g. why it could not be fitted)."""
    metrics_age_s: float | None = None
    policy_target: float | None = None
    killed: tuple[str, ...] = ()
    error: str | None = None
    batches: tuple[tuple[int, float, float, int, int], ...] = ()
    """Batches completed since the previous record: ``(id, started, busy s, records,
    executors)``, times in seconds since the epoch."""

    def to_json(self) -> str:
        return json.dumps(asdict(self), separators=(",", ":"))


def observation(
    snapshot: Any,
    *,
    now: float,
    running: int,
    pending: int,
    splits_per_partition: int = 1,
    batch_executors: dict[int, int] | None = None,
    known_partitions: int = 1,
) -> Observation:
    """The policy's view of a lag snapshot (None → missing metrics, never zero lag).

    Without a snapshot the partition count is ``known_partitions`` (the last one seen), so
    that a metrics outage does not also shrink the usable parallelism.
    """
    if snapshot is None or not snapshot.partitions:
        return Observation(
            now_s=now,
            executors=running,
            partitions=max(1, known_partitions),
            pending_executors=pending,
            splits_per_partition=splits_per_partition,
        )
    executors = batch_executors or {}
    return Observation(
        now_s=now,
        executors=running,
        partitions=len(snapshot.partitions),
        partition_lag=tuple(p.records_lag for p in snapshot.partitions),
        input_rate=snapshot.input_rate,
        processed_rate=snapshot.processed_rate,
        batches=tuple(
            BatchSample(b.records, b.busy_s, executors.get(b.batch_id), b.wall_time - b.busy_s)
            for b in snapshot.batches
        ),
        metrics_age_s=snapshot.age_s,
        time_lag_s=snapshot.max_time_lag_s,
        pending_executors=pending,
        splits_per_partition=splits_per_partition,
    )


@dataclass
class Controller:
    """Drives the executor count of one query.

    ``grant_timeout_s``: executors requested but not running after this long are taken as
    never coming (the cluster has no room): the target falls back to what runs, so the
    policy does not hold forever waiting for them.
    """

    query: str
    tracker: SnapshotSource
    actuator: Actuator
    config: PolicyConfig = field(default_factory=PolicyConfig)
    interval_s: float = 10.0
    splits_per_partition: int = 1
    decision_log: Path | None = None
    grant_timeout_s: float = 60.0
    clock: Callable[[], float] = time.time
    on_decision: Callable[[DecisionRecord], None] | None = None

    def __post_init__(self) -> None:
        if self.interval_s <= 0:
            raise ValueError("interval_s must be > 0")
        self.state = PolicyState()
        self.target: int | None = None
        self.requested_at: float | None = None
        self.records: list[DecisionRecord] = []
        self._batch_executors: dict[int, int] = {}
        self._logged_batch = -1
        self._partitions = self.config.max_executors * self.config.executor_cores
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._log_file: IO[str] | None = None
        self._lock = threading.Lock()

    # one step ------------------------------------------------------------------------------
    def step(self) -> DecisionRecord:
        """Observe, decide, apply once; return (and log) what happened."""
        with self._lock:
            now = self.clock()
            running = self.actuator.running()
            if self.target is None:
                self.target = running
            pending = max(0, self.target - running)
            waited = None if self.requested_at is None else now - self.requested_at
            if pending and waited is not None and waited > self.grant_timeout_s:
                log.warning(
                    "%d executor(s) requested %.0f s ago never came: target back to %d",
                    pending,
                    waited,
                    running,
                )
                self.target, pending = running, 0
            snapshot = self.tracker.snapshot(self.query, now)
            if snapshot is not None:
                for batch in snapshot.batches:
                    self._batch_executors.setdefault(batch.batch_id, running)
                if snapshot.partitions:
                    self._partitions = len(snapshot.partitions)
            obs = observation(
                snapshot,
                now=now,
                running=running,
                pending=pending,
                splits_per_partition=self.splits_per_partition,
                batch_executors=self._batch_executors,
                known_partitions=self._partitions,
            )
            decision, self.state = decide(self.config, self.state, obs)
            result = self._apply(decision, running)
            record = self._record(now, obs, snapshot, decision, running, pending, result)
        self._emit(record)
        return record

    def _apply(self, decision: Decision, running: int) -> ApplyResult | None:
        # Re-apply when more executors run than wanted (a kill lost, executors granted before
        # the first request): the actuator is idempotent and kills the surplus.
        if decision.desired == self.target and running <= decision.desired:
            return None
        result = self.actuator.apply(decision.desired)
        if result.ok:
            self.target = result.target
            self.requested_at = self.clock()
        return result

    def _record(
        self,
        now: float,
        obs: Observation,
        snapshot: Any,
        decision: Decision,
        running: int,
        pending: int,
        result: ApplyResult | None,
    ) -> DecisionRecord:
        outcome = "held" if result is None else ("applied" if result.ok else "failed")
        capacity = decision.capacity
        batches = []
        for b in () if snapshot is None else snapshot.batches:
            if b.batch_id > self._logged_batch:
                executors = self._batch_executors.get(b.batch_id, running)
                started = round(b.wall_time - b.busy_s, 3)
                batches.append((b.batch_id, started, round(b.busy_s, 3), b.records, executors))
        if batches:
            self._logged_batch = max(b[0] for b in batches)
        return DecisionRecord(
            time=round(now, 3),
            query=self.query,
            running=running,
            pending=pending,
            desired=decision.desired,
            reason=str(decision.reason),
            direction=DIRECTIONS[decision.direction],
            outcome=outcome,
            total_lag=None if snapshot is None else snapshot.total_lag,
            max_time_lag_s=None if snapshot is None else round(snapshot.max_time_lag_s, 3),
            input_rate=None if snapshot is None else round(snapshot.input_rate, 1),
            processed_rate=None if snapshot is None else round(snapshot.processed_rate, 1),
            fixed_cost_s=None if capacity is None else _round(capacity.fixed_cost_s),
            executor_rate=None if capacity is None else _round(capacity.rate),
            capacity_method=None if capacity is None else str(capacity.method),
            capacity_note=None if capacity is None else capacity.note or None,
            metrics_age_s=_round(obs.metrics_age_s),
            policy_target=_round(decision.target),
            killed=() if result is None else result.killed,
            error=None if result is None else result.error,
            batches=tuple(batches),
        )

    def _emit(self, record: DecisionRecord) -> None:
        self.records.append(record)
        self.tracker.set_executors(
            self.query,
            target=self.target if self.target is not None else record.running,
            running=record.running,
        )
        self.tracker.set_capacity(
            self.query, fixed_cost_s=record.fixed_cost_s, executor_rate=record.executor_rate
        )
        self.tracker.count_decision(record.direction, record.reason)
        if record.outcome != "held":
            log.info(
                "%s: %s to %d executors (%s): %s",
                self.query,
                record.direction,
                record.desired,
                record.reason,
                record.outcome,
            )
        if self.decision_log is not None:
            if self._log_file is None:
                self.decision_log.parent.mkdir(parents=True, exist_ok=True)
                self._log_file = open(self.decision_log, "a", encoding="utf-8")  # noqa: SIM115
            self._log_file.write(record.to_json() + "\n")
            self._log_file.flush()
        if self.on_decision is not None:
            self.on_decision(record)

    # background loop -----------------------------------------------------------------------
    def start(self) -> None:
        """Run :meth:`step` every ``interval_s`` in a daemon thread until :meth:`stop`."""
        if self._thread is not None:
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._loop, name=f"autoscaler-{self.query}")
        self._thread.daemon = True
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self.step()
            except Exception:  # one bad step must not kill the control loop
                log.exception("autoscaler step failed for %s", self.query)

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.interval_s + 30)
            self._thread = None
        if self._log_file is not None:
            self._log_file.close()
            self._log_file = None

    def __enter__(self) -> Controller:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 3)
