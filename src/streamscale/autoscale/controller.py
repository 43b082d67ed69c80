"""The controller: every interval, lag signals → policy → actuator, and a decision log.

It runs in the driver next to the queries (a daemon thread), reads the lag model's snapshots
of the queries it serves (no Kafka round trip), turns them into the policy's
:class:`Observation` — several queries on one set of executors are one need, their sum — calls the
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
import math
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import IO, Protocol

from streamscale.autoscale.actuator import Actuator, ApplyResult, Lost, describe_removed
from streamscale.autoscale.capacity import UNKNOWN as UNKNOWN_CAPACITY
from streamscale.autoscale.policy import (
    BatchSample,
    Decision,
    Observation,
    PolicyConfig,
    PolicyState,
    decide,
)
from streamscale.autoscale.scale_cost import (
    BatchCost,
    Price,
    ScaleCost,
    ScaleEvent,
    executor_start,
    measure,
    price,
    start_price,
)
from streamscale.errors import ConfigError
from streamscale.lag.model import QuerySnapshot, state_partitions, state_size

log = logging.getLogger(__name__)

DIRECTIONS = {1: "up", -1: "down", 0: "none"}


class SnapshotSource(Protocol):
    """What the controller needs of the lag model (``streamscale.lag.model.LagTracker``):
    per query a :class:`~streamscale.lag.model.QuerySnapshot` (None: no metrics yet), and it
    takes back the executor counts, the capacity estimate and the decisions for ``/metrics``."""

    def snapshot(self, query: str, now: float) -> QuerySnapshot | None: ...

    def snapshots(self, now: float) -> list[QuerySnapshot]: ...

    def set_executors(
        self, query: str, *, target: int | None = None, running: int | None = None
    ) -> None: ...

    def set_capacity(
        self, query: str, *, fixed_cost_s: float | None, executor_rate: float | None
    ) -> None: ...

    def count_decision(self, direction: str, reason: str, n: int = 1) -> None: ...

    def count_lost(self, n: int = 1) -> None: ...

    def set_scale_cost(
        self, query: str, *, pause_s: float, reloaded: int, priced_s: float, base_s: float
    ) -> None: ...

    def set_loss_cost(self, query: str, *, pause_s: float, reloaded: int) -> None: ...


EVENT_MAX_AGE_S = 600.0
"""A scale event still unmeasured after this long is dropped (no steady fit to measure
against, or the query ran no batch)."""


@dataclass(frozen=True)
class DecisionRecord:
    """One control step, as written to the decision log."""

    time: float
    query: str
    """The query served, or the queries' names joined by commas (their need was summed)."""
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
    removed: tuple[tuple[str, int, int, int | None], ...] = ()
    """What the killed executors cost: ``(id, running tasks, state partitions held loaded,
    their bytes in the checkpoint or None)``; the next batch reloads those partitions."""
    lost: tuple[tuple[str, str], ...] = ()
    """Executors gone since the previous record that the autoscaler did not remove:
    ``(id, the cluster's reason)`` (:meth:`.Actuator.lost`). A replacement may register
    before the next step, so ``running`` alone can miss the loss."""
    error: str | None = None
    batches: tuple[tuple[int, float, float, int, int], ...] = ()
    """Batches completed since the previous record: ``(id, started, busy s, records,
    executors)``, times in seconds since the epoch."""
    parallelism: int | None = None
    """Tasks a batch can run at once: the useful executor count is this / executor cores."""
    scale_costs: tuple[dict[str, float | int], ...] = ()
    """Scale events whose cost was measured at this step (:class:`.scale_cost.ScaleCost`):
    the pause each caused over the batches after it and the state they reloaded; executors
    lost (``lost`` true) from the batch in flight then."""
    state_reload_s: float | None = None
    """Seconds to reload the whole state this step priced a change with (measured on the
    last changes; a change pauses ``restart_pause_s`` plus this times the share it moves)."""
    restart_pause_s: float | None = None
    """The part of a change's pause this step priced that does not grow with the state: the
    mean of the last changes' measured (:attr:`.scale_cost.ScaleCost.base_s`), the configured
    one before any."""
    executor_start_s: float | None = None
    """A scale-out's start, measured at this step: seconds from its request until the last
    executor it asked for registered with the driver (:func:`.scale_cost.executor_start`)."""
    scale_up_delay_s: float | None = None
    """The executor start this step priced a scale-out with: the configured one, or the
    measured starts' median where slower (:func:`.scale_cost.start_price`)."""
    parallelism_bound: str | None = None
    """Which bound held: ``source tasks``, or ``state partitions`` (with the operator's
    name) when a stateful stage has fewer tasks than the source."""

    def to_json(self) -> str:
        return json.dumps(asdict(self), separators=(",", ":"))


def observation(
    snapshot: QuerySnapshot | None,
    *,
    now: float,
    running: int,
    pending: int,
    splits_per_partition: int = 1,
    batch_executors: dict[int, int] | None = None,
    known_partitions: int = 1,
    known_state_partitions: int | None = None,
) -> Observation:
    """The policy's view of a lag snapshot (None → missing metrics, never zero lag).

    Without a snapshot the partition counts are ``known_partitions`` and
    ``known_state_partitions`` (the last ones seen), so that a metrics outage does not also
    change the usable parallelism.
    """
    if snapshot is None or not snapshot.partitions:
        return Observation(
            now_s=now,
            executors=running,
            partitions=max(1, known_partitions),
            pending_executors=pending,
            splits_per_partition=splits_per_partition,
            state_partitions=known_state_partitions,
        )
    state = state_partitions(snapshot.state_operators)
    executors = batch_executors or {}
    return Observation(
        now_s=now,
        executors=running,
        partitions=len(snapshot.partitions),
        partition_lag=tuple(p.records_lag for p in snapshot.partitions),
        input_rate=snapshot.input_rate,
        recent_input_rate=snapshot.recent_input_rate,
        processed_rate=snapshot.processed_rate,
        batches=tuple(
            BatchSample(b.records, b.busy_s, executors.get(b.batch_id), b.wall_time - b.busy_s)
            for b in snapshot.batches
        ),
        metrics_age_s=snapshot.age_s,
        time_lag_s=snapshot.max_time_lag_s,
        pending_executors=pending,
        splits_per_partition=splits_per_partition,
        state_partitions=known_state_partitions if state is None else state[0],
    )


@dataclass(frozen=True)
class QueryLimits:
    """What a running query's own options say of its batches (None: not set or not known)."""

    min_partitions: int | None = None
    """The sources' ``minPartitions`` (summed): tasks per batch at least this many."""
    max_offsets_per_trigger: int | None = None
    """The sources' ``maxOffsetsPerTrigger`` (summed): records per batch at most."""
    trigger_interval_s: float | None = None
    """The processing-time trigger's interval (0: batches back to back)."""


def with_limits(config: PolicyConfig, limits: Sequence[QueryLimits | None]) -> PolicyConfig:
    """``config`` with the trigger interval and batch limit the queries really run with.

    Several queries: the shortest trigger interval, and a batch limit only when every query
    has one (their sum). Anything unknown keeps the configured value.
    """
    known = [lim for lim in limits if lim is not None]
    if not known or len(known) < len(limits):
        return config
    triggers = [lim.trigger_interval_s for lim in known if lim.trigger_interval_s is not None]
    if len(triggers) == len(known):
        config = replace(config, trigger_interval_s=min(triggers))
    caps = [lim.max_offsets_per_trigger for lim in known if lim.max_offsets_per_trigger]
    if len(caps) == len(known):
        config = replace(config, max_records_per_trigger=sum(caps))
    return config


def splits_for(partitions: int, min_partitions: int | None, default: int = 1) -> int:
    """Spark tasks per input partition of a source read with ``minPartitions``: the
    connector splits offset ranges so that a batch has at least ``minPartitions`` tasks."""
    if not min_partitions:
        return default
    return max(1, math.ceil(min_partitions / max(1, partitions)))


def combined(parts: Sequence[Observation]) -> Observation:
    """The observation of several queries sharing the application's executors: their need is
    the sum — partitions, lags and rates added, tasks added (their splits kept), time lag and
    metrics age the worst, batches of all (the capacity is fitted across them).

    A query without metrics makes the whole observation one without metrics (the policy holds:
    a missing lag is never read as zero). State partitions: each query's parallel tasks
    summed, when any query is stateful.
    """
    if len(parts) == 1:
        return parts[0]
    stateful = any(o.state_partitions is not None for o in parts)
    first = parts[0]
    partitions = sum(o.partitions for o in parts)
    tasks = sum(o.tasks for o in parts)
    ages = [o.metrics_age_s for o in parts]
    lags = [o.time_lag_s for o in parts if o.time_lag_s is not None]
    return Observation(
        now_s=first.now_s,
        executors=first.executors,
        partitions=partitions,
        partition_lag=tuple(lag for o in parts for lag in o.partition_lag),
        input_rate=sum(o.input_rate for o in parts),
        recent_input_rate=sum(o.arrival_rate for o in parts),
        processed_rate=sum(o.processed_rate for o in parts),
        batches=tuple(
            sorted(
                (b for o in parts for b in o.batches),
                key=lambda b: -math.inf if b.started_s is None else b.started_s,
            )
        ),
        metrics_age_s=None
        if any(a is None for a in ages)
        else max(a for a in ages if a is not None),
        time_lag_s=max(lags) if lags else None,
        pending_executors=first.pending_executors,
        splits_per_partition=max(1, math.ceil(tasks / partitions)),
        state_partitions=sum(o.parallel_tasks for o in parts) if stateful else None,
    )


@dataclass
class Controller:
    """Drives the executor count of the queries of one application.

    ``query``: the query to serve (its name), several names, or None for every query the lag
    model knows (every Kafka query of the session). ``limits`` tells what a query's own options
    say (:class:`QueryLimits`): its ``minPartitions``, so that the parallelism cap counts its
    tasks, and its trigger interval and batch limit, which the capacity model sizes with in
    place of ``config``'s.

    ``grant_timeout_s``: executors requested but not running after this long are taken as
    never coming (the cluster has no room): the target falls back to what runs, so the
    policy does not hold forever waiting for them.
    """

    query: str | tuple[str, ...] | None
    tracker: SnapshotSource
    actuator: Actuator
    config: PolicyConfig = field(default_factory=PolicyConfig)
    interval_s: float = 10.0
    splits_per_partition: int = 1
    limits: Callable[[str], QueryLimits | None] | None = None
    decision_log: Path | None = None
    grant_timeout_s: float = 60.0
    clock: Callable[[], float] = time.time
    on_decision: Callable[[DecisionRecord], None] | None = None

    def __post_init__(self) -> None:
        if self.interval_s <= 0:
            raise ConfigError("interval_s must be > 0")
        # The policy's next decision comes one interval later: it holds a count on that.
        self.config = replace(self.config, decision_interval_s=self.interval_s)
        self.state = PolicyState()
        self.target: int | None = None
        self.requested_at: float | None = None
        self.records: list[DecisionRecord] = []
        self._batch_executors: dict[str, dict[int, int]] = {}
        self._logged_batch: dict[str, int] = {}
        self._partitions: dict[str, int] = {}
        self._state_partitions: dict[str, tuple[int, str]] = {}
        self._served: tuple[str, ...] = ()
        self._events: list[ScaleEvent] = []
        self._known_capacity = UNKNOWN_CAPACITY
        """The last capacity a decision knew: the steady reference of a change decided while
        the batches measure none (a scale-in at lag 0 sees only small batches)."""
        self.costs: list[ScaleCost] = []
        """Every scale event's measured cost, oldest first."""
        self.starts: list[float] = []
        """Every scale-out's measured start (request to the last registration), oldest first."""
        self._start_due: tuple[float, int] | None = None
        """The last applied scale-out whose start is not measured yet: (request time,
        executors it asked for)."""
        self.state_bytes = 0.0
        """The served queries' state size at the last step (their stateful operators' bytes,
        summed; 0: stateless or not reported): the next change's reload is priced for it."""
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
            lost = self.actuator.lost()
            if lost:
                self.tracker.count_lost(len(lost))
            for gone in lost:
                log.warning(
                    "executor %s lost, not removed by the autoscaler (%s); %d running",
                    gone.id,
                    gone.reason or "no reason given",
                    running,
                )
            if lost:
                self._events.append(self._loss(lost, running, now))
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
            snapshots = {name: self.tracker.snapshot(name, now) for name in self._names(now)}
            limits = {
                name: self.limits(name) if self.limits is not None else None for name in snapshots
            }
            parts = [
                self._observe(name, snap, now, running, pending, limits[name])
                for name, snap in snapshots.items()
            ]
            obs = (
                combined(parts)
                if parts
                else observation(None, now=now, running=running, pending=pending)
            )
            config = with_limits(self.config, list(limits.values())) if limits else self.config
            measured = self._measure(snapshots, running)
            sizes = [state_size(s.state_operators) for s in snapshots.values() if s is not None]
            self.state_bytes = float(sum(sizes))
            priced = self.price
            started = self._started()
            config = replace(
                config,
                restart_pause_s=priced.base_s,
                state_reload_s=priced.reload_s,
                scale_up_delay_s=start_price(self.starts, self.config.scale_up_delay_s),
            )
            decision, self.state = decide(config, self.state, obs)
            requested = self.clock()
            result = self._apply(decision, running)
            if result is not None and result.ok:
                more = decision.desired - running
                self._start_due = (requested, more) if more > 0 else None
                if more:
                    capacity = decision.capacity or UNKNOWN_CAPACITY
                    if not capacity.known:
                        capacity = self._known_capacity
                    self._events.append(
                        ScaleEvent(
                            self.clock(), running, decision.desired, capacity, self.state_bytes
                        )
                    )
            if decision.capacity is not None and decision.capacity.known:
                self._known_capacity = decision.capacity
            record = self._record(now, obs, snapshots, decision, running, pending, result, priced)
            if measured:
                record = replace(record, scale_costs=tuple(c.as_dict() for c in measured))
            if lost:
                record = replace(record, lost=tuple(g.as_tuple() for g in lost))
            record = replace(
                record,
                executor_start_s=_round(started),
                scale_up_delay_s=_round(config.scale_up_delay_s),
            )
        self._emit(record, priced)
        return record

    @property
    def price(self) -> Price:
        """What the next change is priced with (:func:`~streamscale.autoscale.scale_cost.
        price`): from the last changes' measured pauses, their state part scaled by the state's
        growth since each (:attr:`state_bytes`); before any, the configured
        ``restart_pause_s`` and no reload."""
        return price(self.costs, self.config.restart_pause_s, self.state_bytes)

    @property
    def state_reload_s(self) -> float:
        """Seconds to reload the whole state elsewhere, priced into the next change."""
        return self.price.reload_s

    def _started(self) -> float | None:
        """The start of the last scale-out, once every executor it asked for registered
        (kept in :attr:`starts`); None before, or with none due. One not complete within
        :data:`EVENT_MAX_AGE_S` is dropped: its executors never came, or came too late to be
        a start the next scale-out should wait for."""
        if self._start_due is None:
            return None
        requested, wanted = self._start_due
        took = executor_start(requested, wanted, self.actuator.registered_since(requested))
        if took is not None and took <= EVENT_MAX_AGE_S:
            self._start_due = None
            self.starts.append(took)
            log.info("%d executor(s) registered %.1f s after the scale-out's request", wanted, took)
            return took
        if took is not None or self.clock() - requested > EVENT_MAX_AGE_S:
            self._start_due = None  # never came, or so late that it is no start to price
        return None

    def _loss(self, lost: tuple[Lost, ...], running: int, now: float) -> ScaleEvent:
        """The scale event of executors lost: from the count the last step saw (or the one
        running now plus the lost), at the driver's first removal time, measured against the
        last capacity a decision knew."""
        before = self.records[-1].running if self.records else running + len(lost)
        times = [g.time_s for g in lost if g.time_s is not None]
        return ScaleEvent(
            min(times, default=now),
            before,
            max(0, before - len(lost)),
            self._known_capacity,
            self.state_bytes,
            lost=True,
        )

    def _measure(self, snapshots: dict[str, QuerySnapshot | None], running: int) -> list[ScaleCost]:
        """Close the scale events whose following batches have run: their measured costs."""
        if not self._events:
            return []
        batches = [
            BatchCost(
                b.wall_time - b.busy_s,
                b.busy_s,
                b.records,
                self._batch_executors.get(name, {}).get(b.batch_id, running),
                b.state_loaded,
                b.state_load_s,
                b.state_bytes_copied,
            )
            for name, snap in snapshots.items()
            if snap is not None
            for b in snap.batches
        ]
        measured: list[ScaleCost] = []
        for event in list(self._events):
            cost = measure(event, batches, known=self._known_capacity)
            if cost is None:
                if self.clock() - event.time_s > EVENT_MAX_AGE_S:
                    self._events.remove(event)  # no steady fit, or no batch ran: unmeasured
                continue
            self._events.remove(event)
            measured.append(cost)
            self.costs.append(cost)
            log.info(
                "%s %d -> %d cost a pause of %.1f s over %d batches (%d state stores "
                "reloaded in %.1f s)",
                "executors lost," if cost.lost else "scale",
                cost.before,
                cost.after,
                cost.pause_s,
                cost.batches,
                cost.reloaded,
                cost.load_s,
            )
        return measured

    def _names(self, now: float) -> tuple[str, ...]:
        if isinstance(self.query, str):
            return (self.query,)
        if self.query:
            return self.query
        return tuple(s.query for s in self.tracker.snapshots(now))

    def _observe(
        self,
        name: str,
        snap: QuerySnapshot | None,
        now: float,
        running: int,
        pending: int,
        limits: QueryLimits | None,
    ) -> Observation:
        executors = self._batch_executors.setdefault(name, {})
        if snap is not None:
            for batch in snap.batches:
                executors.setdefault(batch.batch_id, running)
            if snap.partitions:
                self._partitions[name] = len(snap.partitions)
            state = state_partitions(snap.state_operators)
            if state is not None:
                self._state_partitions[name] = state
        known = self._partitions.get(name, self.config.max_executors * self.config.executor_cores)
        known_state = self._state_partitions.get(name)
        minimum = limits.min_partitions if limits is not None else None
        return observation(
            snap,
            now=now,
            running=running,
            pending=pending,
            splits_per_partition=splits_for(known, minimum, self.splits_per_partition),
            batch_executors=executors,
            known_partitions=known,
            known_state_partitions=None if known_state is None else known_state[0],
        )

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
        snapshots: dict[str, QuerySnapshot | None],
        decision: Decision,
        running: int,
        pending: int,
        result: ApplyResult | None,
        priced: Price,
    ) -> DecisionRecord:
        outcome = "held" if result is None else ("applied" if result.ok else "failed")
        capacity = decision.capacity
        batches = []
        for name, snapshot in snapshots.items():
            logged = self._logged_batch.get(name, -1)
            known = self._batch_executors.get(name, {})
            for b in () if snapshot is None else snapshot.batches:
                if b.batch_id > logged:
                    executors = known.get(b.batch_id, running)
                    started = round(b.wall_time - b.busy_s, 3)
                    batches.append((b.batch_id, started, round(b.busy_s, 3), b.records, executors))
                    self._logged_batch[name] = max(b.batch_id, self._logged_batch.get(name, -1))
        present = [s for s in snapshots.values() if s is not None]
        self._served = tuple(snapshots)
        return DecisionRecord(
            time=round(now, 3),
            query=self.label,
            running=running,
            pending=pending,
            desired=decision.desired,
            reason=str(decision.reason),
            direction=DIRECTIONS[decision.direction],
            outcome=outcome,
            total_lag=sum(s.total_lag for s in present) if present else None,
            max_time_lag_s=round(max(s.max_time_lag_s for s in present), 3) if present else None,
            input_rate=round(sum(s.input_rate for s in present), 1) if present else None,
            processed_rate=round(sum(s.processed_rate for s in present), 1) if present else None,
            fixed_cost_s=None if capacity is None else _round(capacity.fixed_cost_s),
            executor_rate=None if capacity is None else _round(capacity.rate),
            capacity_method=None if capacity is None else str(capacity.method),
            capacity_note=None if capacity is None else capacity.note or None,
            metrics_age_s=_round(obs.metrics_age_s),
            policy_target=_round(decision.target),
            killed=() if result is None else result.killed,
            removed=() if result is None else tuple(r.as_tuple() for r in result.removed),
            error=None if result is None else result.error,
            batches=tuple(batches),
            state_reload_s=_round(priced.reload_s),
            restart_pause_s=_round(priced.base_s),
            parallelism=obs.parallel_tasks,
            parallelism_bound=self._bound(obs),
        )

    def _bound(self, obs: Observation) -> str:
        bound = obs.parallelism_bound
        if bound == "state partitions":
            operators = sorted(
                {op for name in self._served if (op := self._state_partitions.get(name))}
            )
            if operators:
                return f"{bound} ({', '.join(f'{o}: {n}' for n, o in operators)})"
        return bound

    @property
    def label(self) -> str:
        """The ``query`` of the decision records: the name, or the names served last."""
        if isinstance(self.query, str):
            return self.query
        return ",".join(self._served or self.query or ())

    def _emit(self, record: DecisionRecord, priced: Price) -> None:
        self.records.append(record)
        change = next((c for c in reversed(self.costs) if not c.lost), None)
        loss = next((c for c in reversed(self.costs) if c.lost), None)
        for name in self._served:
            self.tracker.set_executors(
                name,
                target=self.target if self.target is not None else record.running,
                running=record.running,
            )
            self.tracker.set_capacity(
                name, fixed_cost_s=record.fixed_cost_s, executor_rate=record.executor_rate
            )
            if change is not None:
                self.tracker.set_scale_cost(
                    name,
                    pause_s=change.pause_s,
                    reloaded=change.reloaded,
                    priced_s=priced.reload_s,
                    base_s=priced.base_s,
                )
            if loss is not None:
                self.tracker.set_loss_cost(name, pause_s=loss.pause_s, reloaded=loss.reloaded)
        self.tracker.count_decision(record.direction, record.reason)
        if record.outcome != "held":
            log.info(
                "%s: %s to %d executors (%s): %s%s",
                record.query or "(no query)",
                record.direction,
                record.desired,
                record.reason,
                record.outcome,
                "".join(f"; {describe_removed(*r)}" for r in record.removed),
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
        self._thread = threading.Thread(target=self._loop, name=f"autoscaler-{self.label}")
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
