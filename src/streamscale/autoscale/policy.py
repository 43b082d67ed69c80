"""Executor-count policies: pure functions of (config, state, observation), no I/O.

Two policies share one set of safety rules:

- ``lag`` — the HPA/KEDA baseline the seed system used: desired = ceil(total lag / lag
  threshold), skipped when the ratio to the current count is within the tolerance (0.1, as the
  HPA does).
- ``rate`` (default) — DS2 / Flink-autoscaler style: the *true* processing rate of one executor
  is measured as processed records / busy time over recent micro-batches; the capacity needed
  is ``input rate / target utilization + backlog / catch-up duration``, plus, when a rescale
  would happen, the records that pile up while it happens (executor start and state-reload
  pause, measured on the cluster and passed in the config); desired = ceil(capacity / rate per
  executor).

Shared rules, applied in this order (each yields one :class:`Reason`):

1. bounds: a current count outside ``[min, upper]`` is brought back at once (before any other
   rule: bounds are configuration), where ``upper`` is ``max_executors`` capped by the usable
   parallelism (input partitions × ``minPartitions`` split / executor cores: more executors
   than tasks idle), never below ``min_executors``;
2. missing or stale metrics hold the current count — an outage is never read as zero lag, and
   it restarts the no-backlog clock;
3. executors already requested and not yet running hold the count (their effect is not yet
   measurable; asking again would overshoot);
4. a change within the tolerance is skipped; ``rate`` scales up to the smallest count the
   tolerance then keeps, and down to a plain ceil (a little headroom, so that measurement
   noise cannot flip it straight back);
5. scale-up happens at once, by at most ``max_up_factor``, but not within the stabilization
   window after a scale-down (no reversal);
6. scale-down needs no backlog, a full stabilization window without backlog and without any
   other change, and removes at most ``scale_down_max_factor`` of the executors (Flink's
   ``scale-down.max-factor`` semantics: 0.6 keeps at least ``ceil(0.4 × current)``).

The production controller and the simulator both call :func:`decide`, so what the benchmark
measures is the code that runs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from enum import StrEnum


class PolicyKind(StrEnum):
    """Which sizing rule computes the desired executor count."""

    RATE = "rate"
    LAG = "lag"


class Reason(StrEnum):
    """Why a decision is what it is (a label on metrics and in the decision log)."""

    SCALE_UP_BACKLOG = "scale_up_backlog"
    SCALE_UP_RATE = "scale_up_rate"
    SCALE_DOWN_IDLE = "scale_down_idle"
    BOUNDED_MIN = "bounded_min"
    BOUNDED_MAX = "bounded_max"
    HOLD_MISSING_METRICS = "hold_missing_metrics"
    HOLD_STALE_METRICS = "hold_stale_metrics"
    HOLD_UNMEASURED_RATE = "hold_unmeasured_rate"
    HOLD_SCALING_IN_PROGRESS = "hold_scaling_in_progress"
    HOLD_WITHIN_TOLERANCE = "hold_within_tolerance"
    HOLD_BACKLOG_DRAINING = "hold_backlog_draining"
    HOLD_STABILIZING = "hold_stabilizing"
    HOLD_REVERSAL = "hold_reversal"
    HOLD_STEADY = "hold_steady"


@dataclass(frozen=True)
class PolicyConfig:
    """Parameters of both policies (defaults follow the HPA, KEDA and Flink's autoscaler)."""

    kind: PolicyKind = PolicyKind.RATE
    min_executors: int = 1
    max_executors: int = 2
    executor_cores: int = 1
    """Tasks one executor runs at once; the usable executor count is tasks / cores."""
    stabilization_window_s: float = 60.0
    """No scale-down before this long without backlog and without a change; no reversal."""
    max_up_factor: float = 4.0
    """One scale-up reaches at most ``ceil(current × factor)`` (at least current + 1)."""
    scale_down_max_factor: float = 0.6
    """Fraction of executors one scale-down may remove (Flink: 0.6 → keep ``ceil(0.4 × n)``)."""
    tolerance: float = 0.1
    """No change while ``|desired / current − 1| <= tolerance`` (fractional desired)."""
    max_metrics_age_s: float = 30.0
    """Older metrics are stale: hold."""
    backlog_tolerance_s: float = 5.0
    """Lag up to this many seconds of input is in-flight work, not a backlog."""
    backlog_min_records: int = 100
    """Lag up to this many records is never a backlog."""
    # lag policy
    lag_threshold: float = 10_000.0
    """Records of lag one executor is expected to carry (HPA ``targetAverageValue``)."""
    # rate policy
    target_utilization: float = 0.7
    catch_up_s: float = 300.0
    """A backlog is to be drained within this duration."""
    scale_up_delay_s: float = 13.0
    """Measured: executor request → first task on it (standalone: ~3 s + ~10 s Python start)."""
    restart_pause_s: float = 5.0
    """Measured: processing pause while state reloads after the executor set changes."""

    def __post_init__(self) -> None:
        checks = [
            (self.min_executors >= 0, "min_executors must be >= 0"),
            (self.max_executors >= max(1, self.min_executors), "max_executors must be >= min"),
            (self.executor_cores >= 1, "executor_cores must be >= 1"),
            (self.stabilization_window_s >= 0, "stabilization_window_s must be >= 0"),
            (self.max_up_factor > 1, "max_up_factor must be > 1"),
            (0 < self.scale_down_max_factor <= 1, "scale_down_max_factor must be in (0, 1]"),
            (0 <= self.tolerance < 1, "tolerance must be in [0, 1)"),
            (self.max_metrics_age_s > 0, "max_metrics_age_s must be > 0"),
            (self.backlog_tolerance_s >= 0, "backlog_tolerance_s must be >= 0"),
            (self.backlog_min_records >= 0, "backlog_min_records must be >= 0"),
            (self.lag_threshold > 0, "lag_threshold must be > 0"),
            (0 < self.target_utilization <= 1, "target_utilization must be in (0, 1]"),
            (self.catch_up_s > 0, "catch_up_s must be > 0"),
            (self.scale_up_delay_s >= 0, "scale_up_delay_s must be >= 0"),
            (self.restart_pause_s >= 0, "restart_pause_s must be >= 0"),
        ]
        for ok, message in checks:
            if not ok:
                raise ValueError(message)


@dataclass(frozen=True)
class BatchSample:
    """One completed micro-batch: records processed and the time spent processing them."""

    records: int
    busy_s: float
    executors: int | None = None
    """Executors that ran the batch (None: the observation's current count)."""


@dataclass(frozen=True)
class Observation:
    """What the controller knows at ``now_s``; the lag model fills it from its samples."""

    now_s: float
    executors: int
    """Executors running now."""
    partitions: int
    """Input topic partitions (all subscribed topics)."""
    partition_lag: tuple[int, ...] = ()
    """Records lag per input partition, one value per partition."""
    input_rate: float = 0.0
    """Records/s arriving in the input topics (recent average)."""
    processed_rate: float = 0.0
    """Records/s processed (recent average)."""
    batches: tuple[BatchSample, ...] = ()
    """Recent completed micro-batches, for the true processing rate."""
    metrics_age_s: float | None = None
    """Age of the newest sample the other fields come from; None when there is none."""
    time_lag_s: float | None = None
    """Seconds behind the newest record (informational)."""
    pending_executors: int = 0
    """Executors requested and not yet running."""
    splits_per_partition: int = 1
    """Spark tasks per input partition (the ``minPartitions`` split)."""

    def __post_init__(self) -> None:
        if self.executors < 0 or self.pending_executors < 0:
            raise ValueError("executor counts must be >= 0")
        if self.partitions < 1 or self.splits_per_partition < 1:
            raise ValueError("partitions and splits_per_partition must be >= 1")

    @property
    def total_lag(self) -> int:
        """Records lag summed over partitions."""
        return sum(self.partition_lag)

    @property
    def tasks(self) -> int:
        """Spark tasks per micro-batch: the parallelism the input allows."""
        return self.partitions * self.splits_per_partition


@dataclass(frozen=True)
class PolicyState:
    """What a policy remembers between decisions (start with ``PolicyState()``)."""

    last_change_s: float | None = None
    last_direction: int = 0
    """+1 after a scale-up, -1 after a scale-down, 0 before any change."""
    clear_since_s: float | None = None
    """Since when fresh metrics have shown no backlog (None: backlog or unknown)."""


@dataclass(frozen=True)
class Decision:
    """The executor count to run and why; ``target`` is the policy's unbounded, fractional
    desired count (None when it was not computed)."""

    desired: int
    reason: Reason
    current: int
    target: float | None = field(default=None, compare=False)

    @property
    def direction(self) -> int:
        """+1 scale-up, -1 scale-down, 0 hold."""
        return (self.desired > self.current) - (self.desired < self.current)


def upper_bound(config: PolicyConfig, obs: Observation) -> int:
    """Largest useful count: ``max_executors`` capped by tasks per batch, never below min."""
    usable = math.ceil(obs.tasks / config.executor_cores)
    return max(config.min_executors, min(config.max_executors, usable))


def _metrics_problem(config: PolicyConfig, obs: Observation) -> Reason | None:
    if obs.metrics_age_s is None or len(obs.partition_lag) != obs.partitions:
        return Reason.HOLD_MISSING_METRICS
    values = [obs.input_rate, obs.processed_rate, obs.metrics_age_s]
    if any(not math.isfinite(v) or v < 0 for v in values) or any(x < 0 for x in obs.partition_lag):
        return Reason.HOLD_MISSING_METRICS
    if obs.metrics_age_s > config.max_metrics_age_s:
        return Reason.HOLD_STALE_METRICS
    return None


def has_backlog(config: PolicyConfig, obs: Observation) -> bool:
    """Lag beyond in-flight work: more than ``backlog_tolerance_s`` of input (and the floor)."""
    allowed = config.backlog_min_records + obs.input_rate * config.backlog_tolerance_s
    return obs.total_lag > allowed


def executor_rate(obs: Observation, tasks_cap: int) -> float | None:
    """True processing rate of one executor, records/s of busy time (None: not measurable).

    Sum of records over sum of busy executor-seconds, executors capped at the usable count.
    Empty batches are skipped: their fixed overhead says nothing about throughput.
    """
    records = 0
    busy = 0.0
    for batch in obs.batches:
        executors = obs.executors if batch.executors is None else batch.executors
        executors = min(executors, tasks_cap)
        if batch.records <= 0 or batch.busy_s <= 0 or executors <= 0:
            continue
        if not math.isfinite(batch.busy_s):
            continue
        records += batch.records
        busy += batch.busy_s * executors
    if records == 0 or busy <= 0:
        return None
    return records / busy


def _rate_capacity(config: PolicyConfig, obs: Observation) -> float:
    """Records/s needed: input at the target utilization plus the backlog over catch-up."""
    return obs.input_rate / config.target_utilization + obs.total_lag / config.catch_up_s


def _rate_wanted(
    config: PolicyConfig, obs: Observation, capacity: float, rate: float, up: bool
) -> int:
    """Executor count for a change, including the records the change itself lets pile up.

    Up: the smallest count the tolerance rule then keeps (no ceil-induced overshoot).
    Down: a plain ceil, so that the new count runs at or under the target utilization and
    measurement noise cannot push it straight back over the tolerance (no flapping).
    """
    pause = config.restart_pause_s + (config.scale_up_delay_s if up else 0.0)
    target = (capacity + obs.input_rate * pause / config.catch_up_s) / rate
    if up:
        return math.ceil(target / (1 + config.tolerance) - 1e-9)
    return math.ceil(target - 1e-9)


def _lag_target(config: PolicyConfig, obs: Observation) -> float:
    return obs.total_lag / config.lag_threshold


def decide(
    config: PolicyConfig, state: PolicyState, obs: Observation
) -> tuple[Decision, PolicyState]:
    """Decide the executor count for ``obs``; return the decision and the next state.

    Pure and total: any observation yields a decision within ``[min, upper_bound]``.
    """
    now = obs.now_s
    current = obs.executors + obs.pending_executors
    lo = config.min_executors
    hi = upper_bound(config, obs)
    problem = _metrics_problem(config, obs)
    backlog = problem is None and has_backlog(config, obs)

    if problem is not None or backlog:
        clear_since: float | None = None
    else:
        clear_since = now if state.clear_since_s is None else state.clear_since_s
    state = replace(state, clear_since_s=clear_since)

    def hold(reason: Reason, target: float | None = None) -> tuple[Decision, PolicyState]:
        return Decision(current, reason, current, target), state

    def change(desired: int, reason: Reason, target: float | None) -> tuple[Decision, PolicyState]:
        direction = 1 if desired > current else -1
        new_state = replace(state, last_change_s=now, last_direction=direction)
        if direction < 0:  # the executor set changes: the no-backlog clock restarts
            new_state = replace(new_state, clear_since_s=None)
        return Decision(desired, reason, current, target), new_state

    if current < lo:
        return change(lo, Reason.BOUNDED_MIN, None)
    if current > hi:
        return change(hi, Reason.BOUNDED_MAX, None)
    if problem is not None:
        return hold(problem)
    if obs.pending_executors > 0:
        return hold(Reason.HOLD_SCALING_IN_PROGRESS)
    since_change = math.inf if state.last_change_s is None else now - state.last_change_s
    window = config.stabilization_window_s
    if current == 0 and (obs.total_lag > 0 or obs.input_rate > 0):
        # Nothing runs, so nothing is measured: start one executor and measure.
        if state.last_direction < 0 and since_change < window:
            return hold(Reason.HOLD_REVERSAL)
        return change(1, Reason.SCALE_UP_BACKLOG, None)

    rate: float | None = None
    if config.kind is PolicyKind.LAG:
        target = _lag_target(config, obs)
    else:
        capacity = _rate_capacity(config, obs)
        rate = executor_rate(obs, hi)
        if rate is None and capacity > 0:
            return hold(Reason.HOLD_UNMEASURED_RATE)
        # Nothing arriving and nothing behind needs no capacity, whatever the rate.
        target = 0.0 if rate is None else capacity / rate
    if current > 0 and abs(target / current - 1) <= config.tolerance:
        return hold(Reason.HOLD_WITHIN_TOLERANCE, target)
    if rate is None:
        wanted = math.ceil(target - 1e-9)  # the HPA's rounding
    else:
        wanted = _rate_wanted(config, obs, capacity, rate, up=target > current)

    if wanted > current:
        if state.last_direction < 0 and since_change < window:
            return hold(Reason.HOLD_REVERSAL, target)
        if current >= hi:
            return hold(Reason.BOUNDED_MAX, target)
        step_limit = max(current + 1, math.ceil(current * config.max_up_factor))
        desired = min(wanted, step_limit, hi)
        # The reason says why it scales; a cap at the bound shows as target > desired.
        reason = Reason.SCALE_UP_BACKLOG if backlog else Reason.SCALE_UP_RATE
        return change(desired, reason, target)

    if wanted < current:
        if backlog:
            return hold(Reason.HOLD_BACKLOG_DRAINING, target)
        if state.last_direction > 0 and since_change < window:
            return hold(Reason.HOLD_REVERSAL, target)
        if since_change < window or clear_since is None or now - clear_since < window:
            return hold(Reason.HOLD_STABILIZING, target)
        if current <= lo:
            return hold(Reason.BOUNDED_MIN, target)
        floor = math.ceil(current * (1 - config.scale_down_max_factor))
        desired = max(wanted, floor, lo)
        if desired >= current:
            return hold(Reason.HOLD_STEADY, target)
        return change(desired, Reason.SCALE_DOWN_IDLE, target)

    return hold(Reason.HOLD_STEADY, target)
