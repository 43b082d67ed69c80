"""What a scale event cost: the pause it caused, measured on the batches that followed it.

Flink's autoscaler measures each rescale's restart time and prices it into the next decision;
Kafka Streams' warm-up replicas exist because moving state is the cost of a change. Here a
change of the executor count costs the batches after it time above what the capacity fit,
taken just before the change, predicts for their records at their executor count: tasks
rescheduled, Kafka consumers and Python workers started on new executors, and state
partitions reloaded from the checkpoint (RocksDB snapshot plus changelog replay) wherever a
state partition moved. :func:`measure` adds that excess over the first ``window`` batches
that started after the change, with the state the stateful operators reloaded meanwhile.

Pure: no Spark, no I/O. The controller opens a :class:`ScaleEvent` when it applies a change,
and prices the next change from the measured pauses (:func:`price`): only the part of a pause
its stateful operators spent loading state grows with the state; the rest (executors joining,
Python workers starting, tasks rescheduled) is the change's own. It also opens one when an
executor is lost (a crash, a host cut off: :attr:`ScaleEvent.lost`): what the loss cost is
measured and reported the same way, and priced into no change.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from streamscale.autoscale.capacity import Capacity, CapacityMethod

WINDOW = 3
"""Batches after a change over which its pause is measured (a moved state partition is
reloaded by the first batch that runs it; stragglers by the next)."""


@dataclass(frozen=True)
class ScaleEvent:
    """A change of the executor count, applied at ``time_s`` (seconds since the epoch)."""

    time_s: float
    before: int
    after: int
    capacity: Capacity
    """The capacity fit when the change was decided: the steady reference."""
    state_bytes: float = 0.0
    """The query's state size when the change was applied (0: unknown or stateless): what
    the measured reload is priced against (:func:`reload_estimate`)."""
    lost: bool = False
    """Nobody decided it: ``before - after`` executors were lost at ``time_s`` (the driver's
    removal time). The batch in flight then counts too: its tasks on the lost executors ran
    again elsewhere, after the cluster noticed the loss."""


@dataclass(frozen=True)
class BatchCost:
    """One batch as the measure needs it: when it started, how long it ran, its records,
    the executors it ran on, and what its stateful operators reloaded."""

    started_s: float
    busy_s: float
    records: int
    executors: int
    loaded: int = 0
    """State stores loaded from the checkpoint (``rocksdbNumLoadedFromDfs``, summed)."""
    load_s: float = 0.0
    bytes_copied: int = 0


@dataclass(frozen=True)
class ScaleCost:
    """The measured cost of one :class:`ScaleEvent`."""

    time_s: float
    before: int
    after: int
    batches: int
    pause_s: float
    """Busy time of the batches after the change above the steady fit's prediction."""
    reloaded: int
    """State stores reloaded from the checkpoint by those batches."""
    load_s: float
    bytes_copied: int
    state_bytes: float = 0.0
    """The state's size at the change (:attr:`ScaleEvent.state_bytes`)."""
    lost: bool = False
    """The cost of executors lost (:attr:`ScaleEvent.lost`), not of a change."""

    @property
    def prices(self) -> bool:
        """Whether the next change is priced from it: a change that moved executors, not
        executors lost (whose pause holds the time the cluster took to notice the loss)."""
        return self.before != self.after and not self.lost

    @property
    def state_s(self) -> float:
        """The part of the pause spent loading state: the stateful operators' measured load
        time (``rocksdbLoadLatencyMs``, summed over their tasks: a bound of what it added to
        the batches), at most the pause. Only this part grows with the state."""
        return min(self.pause_s, self.load_s)

    @property
    def base_s(self) -> float:
        """The rest of the pause: executors joining, Python workers and Kafka consumers
        starting, tasks rescheduled; the same whatever the state's size."""
        return self.pause_s - self.state_s

    @classmethod
    def from_dict(cls, record: Mapping[str, Any]) -> ScaleCost:
        """The cost :meth:`as_dict` wrote (a decision record's ``scale_costs``); fields an
        older log lacks are 0. KeyError, TypeError or ValueError when it is not one."""
        return cls(
            time_s=float(record.get("time", 0.0)),
            before=int(record["before"]),
            after=int(record["after"]),
            batches=int(record.get("batches", 0)),
            pause_s=float(record["pause_s"]),
            reloaded=int(record.get("reloaded", 0)),
            load_s=float(record.get("load_s", 0.0)),
            bytes_copied=int(record.get("bytes_copied", 0)),
            state_bytes=float(record.get("state_bytes", 0.0)),
            lost=bool(record.get("lost", False)),
        )

    def as_dict(self) -> dict[str, float | int]:
        return {
            "time": round(self.time_s, 3),
            "before": self.before,
            "after": self.after,
            "batches": self.batches,
            "pause_s": round(self.pause_s, 3),
            "reloaded": self.reloaded,
            "load_s": round(self.load_s, 3),
            "bytes_copied": self.bytes_copied,
            "state_bytes": round(self.state_bytes),
            "lost": self.lost,
        }


SETTLE = 2
"""Batches after the window, at the new count, that stand for the steady batch time when the
change was decided on a lower bound of the capacity (fixed cost unknown)."""


def measure(
    event: ScaleEvent,
    batches: Sequence[BatchCost],
    window: int = WINDOW,
    settle: int = SETTLE,
    known: Capacity | None = None,
) -> ScaleCost | None:
    """The cost of ``event`` once ``window`` batches started after it (for executors lost,
    ran after it: the batch in flight first); None before that, or when there was no steady
    fit to measure against (a pause is never made up).

    ``known``: the capacity known now, when the event's batches have run, measured against
    when the event's own is unknown: a change decided before any fit formed (the ``lag``
    policy's first scale-out on a backlog whose batches all ran at the batch limit, from
    which no fixed cost is fitted) is measured once a later decision knows one, rather than
    never.

    A change decided on a lower bound of the capacity (:attr:`.CapacityMethod.LOWER_BOUND`:
    the rate of batches at the limit, their fixed cost taken as 0) waits for ``settle`` more
    batches at the new count: their time above what that rate predicts for their records is
    the fixed cost the bound leaves out (the median), added to the bound's prediction. Measured
    against the bound alone, every batch's fixed cost counted as pause (on the demo's state
    store, about 3 s a batch whatever its size)."""
    after = sorted((b for b in batches if _after(event, b)), key=lambda b: b.started_s)
    capacity = event.capacity
    if not capacity.known and known is not None:
        capacity = known
    if len(after) < window or not capacity.known:
        return None
    assert capacity.rate is not None and capacity.fixed_cost_s is not None
    counted = after[:window]
    if capacity.method is CapacityMethod.LOWER_BOUND:
        steady = [b for b in after[window:] if b.executors == event.after][:settle]
        if len(steady) < settle:
            return None
        fixed = statistics.median(
            max(0.0, b.busy_s - b.records / (max(1, b.executors) * capacity.rate)) for b in steady
        )
        capacity = replace(capacity, fixed_cost_s=capacity.fixed_cost_s + fixed)
    excess = sum(
        max(0.0, b.busy_s - capacity.batch_seconds(b.records, b.executors)) for b in counted
    )
    return ScaleCost(
        time_s=event.time_s,
        before=event.before,
        after=event.after,
        batches=len(counted),
        pause_s=excess,
        reloaded=sum(b.loaded for b in counted),
        load_s=sum(b.load_s for b in counted),
        bytes_copied=sum(b.bytes_copied for b in counted),
        state_bytes=event.state_bytes,
        lost=event.lost,
    )


def _after(event: ScaleEvent, batch: BatchCost) -> bool:
    """Whether ``batch`` pays for ``event``: it started after it, or ran when executors were
    lost (the batch in flight)."""
    if batch.started_s >= event.time_s:
        return True
    return event.lost and batch.started_s + batch.busy_s > event.time_s


def moved_share(before: int, after: int) -> float:
    """The share of a query's state a change from ``before`` to ``after`` executors moves:
    Spark keeps a state partition where it was loaded, so a scale-out moves about the new
    executors' share to them, a scale-in the removed executors' share off them."""
    return abs(after - before) / max(after, before, 1)


def pause_for(base_s: float, reload_s: float, before: int, after: int) -> float:
    """The pause of a change: ``base_s`` (tasks rescheduled, executors joining) plus the
    reload of the state share that moves, ``reload_s`` being the whole state's."""
    return 0.0 if before == after else base_s + reload_s * moved_share(before, after)


@dataclass(frozen=True)
class Price:
    """What the next change is priced with: a pause of ``base_s`` plus ``reload_s`` times the
    share of the state it moves (:func:`pause_for`)."""

    base_s: float
    reload_s: float


def price(costs: Sequence[ScaleCost], base_s: float, state_bytes: float = 0.0) -> Price:
    """The price of the next change from the last three measured ``costs``: their base parts'
    mean (:attr:`ScaleCost.base_s`; ``base_s``, the configured pause, before any), and the
    whole state's reload from their state parts (:attr:`ScaleCost.state_s`) over the share
    each moved, scaled by the state's growth since (:func:`reload_estimate`). Executors lost
    (:attr:`ScaleCost.lost`) price nothing: their pause holds the time the cluster took to
    notice the loss (a heartbeat timeout, for a host cut off), which no change pays.

    Split so because a pause mostly made of executors starting says nothing about the state:
    priced whole as reload and scaled by the state's growth, the demo's first scale-out (7.9 s,
    of which 0.05 s loading state) priced a whole reload at 83 s once the state had grown
    14-fold, and at up to 159 s later in the run."""
    recent = [c for c in costs if c.prices][-3:]
    if not recent:
        return Price(base_s, 0.0)
    reload_s = reload_estimate(
        [(c.state_s, c.before, c.after) for c in recent],
        0.0,
        [c.state_bytes for c in recent],
        state_bytes,
    )
    return Price(sum(c.base_s for c in recent) / len(recent), reload_s)


START_WINDOW = 5
"""Measured executor starts the next scale-out is priced with (:func:`start_price`)."""


def executor_start(requested_s: float, wanted: int, registered_s: Iterable[float]) -> float | None:
    """Seconds from a scale-out's request (at ``requested_s``, for ``wanted`` executors)
    until the last of them registered with the driver: the ``wanted``-th registration at or
    after the request (``registered_s``: registration times, seconds since the epoch); None
    until that many have registered."""
    after = sorted(t for t in registered_s if t >= requested_s)
    if wanted < 1 or len(after) < wanted:
        return None
    return after[wanted - 1] - requested_s


def start_price(measured: Sequence[float], configured_s: float) -> float:
    """The executor start the next scale-out is priced with: the configured one (start
    plus the first Python task, measured on standalone), or the median of the last
    :data:`START_WINDOW` measured registrations where they are slower: a cluster whose pods
    pull their image at start, or a machine too busy to start a JVM in that time. A start
    measured faster than the configured one lowers nothing: the registration is not yet the
    executor's first task."""
    recent = list(measured)[-START_WINDOW:]
    return max(configured_s, statistics.median(recent)) if recent else configured_s


SCALED_FROM_BYTES = 1_000_000
"""The smallest state whose measured reload is scaled by the state's growth. Below it the
load is mostly the stores' opening: the game sessions' first scale-out in the demo loaded a
32 KB state in 0.80 s (Spark's transformWithState opens a store's column families), and
scaled by the state's 200-fold growth it priced a whole reload at 317 s; 20 MB loaded in
0.09 s at the scale-in that followed."""


def reload_estimate(
    changes: Sequence[tuple[float, int, int]],
    base_s: float,
    sizes: Sequence[float] = (),
    state_bytes: float = 0.0,
) -> float:
    """Seconds to reload the whole state, from the last three changes' ``(pause, before,
    after)``: each pause above ``base_s`` over the share it moved; 0 before any change. The
    controller gives it the measured pauses, the simulator the pauses its model applied.

    Priced from the state's size when it is known: ``sizes`` (aligned with ``changes``) are
    the state's bytes at each change, ``state_bytes`` its bytes now, and each change's reload
    is scaled by how much the state grew (or shrank) since. A state that keeps growing makes
    every move dearer than the last one measured; unscaled, the price lags the state. A change
    of unknown size (0, or no ``sizes``) counts as measured, and so does one of a state under
    :data:`SCALED_FROM_BYTES`: its load timed the stores' opening more than their bytes."""
    recent = list(zip(changes, [*sizes, *([0.0] * len(changes))], strict=False))[-3:]
    estimates = []
    for (pause, before, after), size in recent:
        if before == after:
            continue
        reload_s = max(0.0, pause - base_s) / moved_share(before, after)
        if size >= SCALED_FROM_BYTES and state_bytes > 0:
            reload_s *= state_bytes / size
        estimates.append(reload_s)
    return sum(estimates) / len(estimates) if estimates else 0.0
