"""Executor-count policies: pure functions of (config, state, observation), no I/O.

Two policies share one set of safety rules:

- ``lag`` — the HPA/KEDA baseline the seed system used: desired = ceil(total lag / lag
  threshold), skipped when the ratio to the current count is within the tolerance (0.1, as the
  HPA does).
- ``rate`` (default) — DS2 / Flink-autoscaler style, for micro-batches: the capacity of one
  executor is a fixed cost per batch plus a rate for its records, fitted over recent batches of
  different sizes (:mod:`~streamscale.autoscale.capacity`); the load to carry is
  ``input rate / target utilization + backlog / catch-up duration``, plus, when a rescale would
  happen, the records that pile up while it happens (executor start and state-reload pause,
  measured on the cluster and passed in the config); the catch-up duration is ``catch_up_s``
  unless the time lag is predicted to pass ``urgent_time_lag_s`` at the current throughput
  (:func:`catch_up_seconds`: a burst one executor cannot absorb in time); desired is the
  executor count whose batches carry that load within a cycle of at least the trigger
  interval, within the batch limit (``maxOffsetsPerTrigger``), each batch paying its fixed cost
  (:func:`~streamscale.autoscale.capacity.executors_needed`). A scale-up is bounded by the
  latency objective: when fewer executors than that keep the predicted time lag within
  ``SLO_MARGIN × urgent_time_lag_s`` over the next ``slo_horizon_s`` seconds (the input going
  on at its rate; :func:`predicted_peak_time_lag`), it asks for those — a short spike is not
  sized as if it were the new input rate, and the next decisions re-check. A small batch at
  lag 0 is no sign
  of saturation: while the batches cannot be fitted (too few, all of about the same size) and
  no earlier fit is remembered, the policy holds — unless the backlog is urgent (below), where
  it sizes on a lower bound of the rate.

Shared rules, applied in this order (each yields one :class:`Reason`):

1. bounds: a current count outside ``[min, upper]`` is brought back at once (before any other
   rule: bounds are configuration), where ``upper`` is ``max_executors`` capped by the usable
   parallelism (input partitions × ``minPartitions`` split / executor cores: more executors
   than tasks idle), never below ``min_executors``;
2. missing or stale metrics hold the current count — an outage is never read as zero lag, and
   it restarts the no-backlog clock;
3. executors already requested and not yet running hold the count (their effect is not yet
   measurable; asking again would overshoot);
4. warm-up: no decision until ``warmup_batches`` batches have started after the query's start
   or after the executor set last changed (Flink's stabilization interval, counted in
   batches); an idle query (no input, no lag) runs no batch and needs none;
5. a change within the tolerance is skipped; ``rate`` scales up to the smallest count the
   tolerance then keeps, and down to a plain ceil (a little headroom, so that measurement
   noise cannot flip it straight back);
6. scale-up happens at once, by at most ``max_up_factor``, but not within the stabilization
   window after a scale-down (no reversal);
7. scale-down needs no backlog, a full stabilization window without backlog and without any
   other change, and removes at most ``scale_down_max_factor`` of the executors (Flink's
   ``scale-down.max-factor`` semantics: 0.6 keeps at least ``ceil(0.4 × current)``); never
   within the window after a scale-up (no reversal). ``rate`` counts the window without
   backlog from what it measures (:func:`_no_backlog_since`): a backlog seen inside the window
   after a change — the one a scale-up was sized to drain, or the one a rescale's pause
   causes — does not restart it when it is gone by the window's end (the window after the
   change has been the wait), and it starts at the last backlog its executors no longer
   needed (``hold_backlog_draining``: its target, backlog included, below the running count)
   rather than at the next observation. ``lag`` sizes on the lag itself, so only a window
   of observations without backlog shows that its count is no longer needed.

``rate`` spends the latency budget on purpose, as the cheapest plan that keeps the objective
does: a count that carries at least ``target_utilization`` of a steady input (the input
outgrows it by no more than the sizing margin) may run though the backlog slowly grows. A
scale-down goes to such a count (:func:`riding_count`) when, with it, the predicted time lag
(a batch's cycle and a later scale-up's pause included) stays within ``SLO_MARGIN ×
urgent_time_lag_s`` for a whole ``catch_up_s``; a running count short of the rate target is
held (``hold_within_budget``) while a scale-up at the next decision would still keep that
bound (:func:`_budget_holds`). Entered with a catch-up duration of budget and left with one
decision's, a steady input does not flap; and a count whose budget ran out is not ridden again
at that input (``PolicyState.outgrown``): a steady input rides once. A rising input, an
unknown time lag and the urgent backlog spend nothing.

Two rules of ``rate`` come from a trace family it was not tuned on (issue 23,
:mod:`~streamscale.autoscale.family`):

- *an outage is not an end*: while no record arrives (:func:`silent`), a scale-down is sized
  for the rate last heard, for up to ``catch_up_s`` (:func:`scale_down_rate`). Producers cut
  off from the brokers come back, often with what they held; the count removed during their
  silence had to be added back as they returned, late (a reversal, and an SLO violation);
- *a count the input outgrows is topped up* (:func:`outgrown_count`: the input alone exceeds
  what the running and requested executors carry, by more than the tolerance): the warm-up
  and the wait for requested executors do not hold it. A scale-up decided as a surge starts
  sizes on averages that show part of it; its executors' start and warm-up took 30-60 s more
  before the next one could add what was missing.

Four more rules of ``rate`` from the same family and from the ``stateful`` trace, where the
rescale pause grows with the state (issue 23: the cost of a change, priced):

- *a bet on a short burst is placed once* (:func:`_rate_target`): the first scale-up of a
  surge may stop at the SLO-bounded count (its horizon lengthened by the state reload the
  change costs); a scale-up that tops up a recent one sizes for the whole input at the
  target utilization (:func:`carrying_count`, over a horizon that starts after the new
  executors' start and pause, a batch cycle included) — no more one executor at a time, each
  step another start and pause;
- *a scale-down keeps headroom for the input's measured noise* (:func:`noisy_rate`: two
  robust standard deviations of the recent input rates of the window's steady
  observations around their trend, :func:`noise_spread`: a ramp or a cycle is not noise),
  since no scale-up may follow it for a window;
- *a stateful scale-down keeps a way back* (:func:`reserve_holds`): should the input return
  to the rate the last scale-up was for, one scale-up from the smaller count, its priced
  pause included, keeps the objective — where the state's reload is what would break it;
- *a change is worth its pause or is not made* (:func:`not_worth_its_pause`,
  ``hold_pause_cost``): a scale-up that would not lower the predicted time lag, its start and
  pause counted, while the running count carries the input; and, while it falls short of
  the input, one predicted to break the objective where holding is predicted to keep it
  (a top-up whose state reload, at a time lag already near the objective, is what breaks
  it). A held shortfall is checked again at every decision and topped up once holding,
  too, is predicted to break the objective.

An opt-in rule trades executors for safety against surges (``surge_share``, 0 by default,
:func:`surge_holds`): a scale-down keeps the count that rides out a surge of that share of
the input until a scale-up could follow it. On the trace family it lowers the seeds where
``rate`` breaks the objective and the oracle does not, at a price in executor-seconds
(docs/benchmarks.md, "The price of safety against surges").

``rate`` reverses no scale-down inside the window, not even for an urgent backlog (the time
lag past ``urgent_time_lag_s``, default 30 s, the latency objective): it waits out the
window, then skips the warm-up (``lag``, like the HPA, reverses it at once:
:func:`reverses_for_urgency`). Until 2026-11-28 an urgent backlog reversed the scale-down
at once (``scale_up_urgent``); on the 600 seeds of the trace family that happened on one
(stateful 3026: a flash sale 5 s after a scale-down), where waiting costs 9 s more beyond the
objective (docs/peers.md). The opt-in rule ``reverse_for_slo`` (off by default,
:func:`slo_at_risk`) puts the objective first: an urgent backlog reverses a scale-down at
once, as ``scale_up_urgent``, and a backlog is urgent before the objective is broken: while
the input rises and the running count is predicted to break it. A surge that arrives within
the window after a scale-down is then met at once, at the price of a reversal; on the trace
family it removes most of the seconds ``rate`` spends beyond the objective where the oracle
does not (docs/benchmarks.md, "The objective or no reversal").

The production controller and the simulator both call :func:`decide`, so what the benchmark
measures is the code that runs.
"""

from __future__ import annotations

import bisect
import itertools
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum

from streamscale.autoscale import capacity as cap
from streamscale.autoscale import forecast as fc
from streamscale.autoscale.capacity import BatchSample, Capacity, CapacityMethod
from streamscale.autoscale.scale_cost import pause_for
from streamscale.errors import ConfigError

__all__ = [
    "BatchSample",
    "Capacity",
    "CapacityMethod",
    "Decision",
    "Observation",
    "PolicyConfig",
    "PolicyKind",
    "PolicyState",
    "Reason",
    "catch_up_seconds",
    "decide",
    "has_backlog",
    "measure_capacity",
    "predicted_peak_time_lag",
    "slo_at_risk",
    "surge_holds",
    "upper_bound",
    "urgent_backlog",
    "usable_executors",
]


class PolicyKind(StrEnum):
    """Which sizing rule computes the desired executor count."""

    RATE = "rate"
    LAG = "lag"


class Reason(StrEnum):
    """Why a decision is what it is (a label on metrics and in the decision log)."""

    SCALE_UP_BACKLOG = "scale_up_backlog"
    SCALE_UP_RATE = "scale_up_rate"
    SCALE_UP_URGENT = "scale_up_urgent"
    SCALE_DOWN_IDLE = "scale_down_idle"
    BOUNDED_MIN = "bounded_min"
    BOUNDED_MAX = "bounded_max"
    HOLD_MISSING_METRICS = "hold_missing_metrics"
    HOLD_STALE_METRICS = "hold_stale_metrics"
    HOLD_UNMEASURED_RATE = "hold_unmeasured_rate"
    HOLD_SCALING_IN_PROGRESS = "hold_scaling_in_progress"
    HOLD_WARMING_UP = "hold_warming_up"
    HOLD_WITHIN_TOLERANCE = "hold_within_tolerance"
    HOLD_BACKLOG_DRAINING = "hold_backlog_draining"
    HOLD_WITHIN_BUDGET = "hold_within_budget"
    HOLD_STABILIZING = "hold_stabilizing"
    HOLD_REVERSAL = "hold_reversal"
    HOLD_STEADY = "hold_steady"
    HOLD_PAUSE_COST = "hold_pause_cost"
    """rate: every smaller count would break the latency objective during the pause the
    change costs (its state reload, as measured on the last changes), or leave no way back
    to the input the last scale-up was for; or a scale-up would not lower the predicted time
    lag, its own pause counted."""


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
    target_utilization: float = 0.95
    """Records rate one executor is sized to carry, as a fraction of its fitted rate (Flink
    uses 0.7 for continuous operators; a micro-batch query has a second margin, the cycle
    budget, and overload lengthens its batches, which amortizes their fixed cost;
    ``benchmarks/autoscaler.py --target-utilization`` measures the trade-off)."""
    catch_up_s: float = 300.0
    """A backlog is to be drained within this duration."""
    scale_up_delay_s: float = 13.0
    """Measured: executor request → first task on it (standalone: ~3 s + ~10 s Python start)."""
    restart_pause_s: float = 5.0
    """Processing pause after the executor set changes, state aside (tasks rescheduled)."""
    state_reload_s: float = 0.0
    """Seconds to reload the query's whole state elsewhere, as measured on the last changes
    (:func:`.scale_cost.reload_estimate`): a change pauses ``restart_pause_s`` plus this times
    the share of the state it moves."""
    trigger_interval_s: float = 1.0
    """The query's processing-time trigger (0: batches back to back)."""
    max_records_per_trigger: int | None = None
    """The query's batch limit (``maxOffsetsPerTrigger``); None: unlimited."""
    # both policies
    warmup_batches: int = 3
    """Batches to complete after start or after the executor set changes before deciding."""
    urgent_time_lag_s: float = 30.0
    """Time lag past which a backlog is urgent: it skips the warm-up after a scale-down, and
    with ``reverse_for_slo`` the window too (there also predicted to pass, while the input
    rises)."""
    slo_horizon_s: float = 60.0
    """A scale-up adds the fewest executors that keep the predicted time lag within
    ``SLO_MARGIN × urgent_time_lag_s`` over this horizon, when that is fewer than the rate
    target (0: always the rate target)."""
    decision_interval_s: float = 10.0
    """Seconds between two decisions (the controller's interval): a count held within the
    latency budget must leave time for a scale-up at the next decision."""
    surge_share: float = 0.0
    """``rate``: a scale-down keeps the count that rides out a surge of this share of the
    input (0.5: the input 1.5 times what it is), arriving at once and lasting until a
    scale-up could follow (:func:`surge_holds`). No scale-up may follow a scale-down within
    the stabilization window, so a surge that arrives then meets the smaller count alone.
    0 (the default) assumes no surge: cheaper, and exposed to one in that window
    (``benchmarks/autoscaler_family.py --surge-share`` measures the trade-off)."""
    reverse_for_slo: bool = False
    """``rate``: while the input rises, a backlog is urgent as soon as the running count is
    predicted to break the time-lag objective (:func:`slo_at_risk`), not only once the
    observed time lag has: a surge that arrives within the stabilization window after a
    scale-down is then met by a scale-up at once, a reversal, as is a backlog already past
    the objective. Off (the default): no reversal inside the window. The objective before the
    no-reversal rule;
    ``benchmarks/autoscaler_family.py --reverse-for-slo`` measures the trade-off."""
    forecast: bool = False
    """``rate``: learn a recurring load from the input rates observed (:mod:`.forecast`: its
    period found by autocorrelation, never configured) and size for the time lag it predicts
    (:func:`forecast_counts`): the fewest executors that keep the predicted time lag within
    the budget over a scale-up's lead (start, rescale pause, state reload, a decision) and
    the objective's horizon, the predicted input included, asked for once waiting a decision
    would need more; no scale-down to a count that would not keep it until a scale-up could
    follow. Where no period is found, or the input exceeds what it predicts for now, no
    change. Off by default until ``benchmarks/recurring.py`` and the family runs show it
    pays."""

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
            (self.state_reload_s >= 0, "state_reload_s must be >= 0"),
            (self.trigger_interval_s >= 0, "trigger_interval_s must be >= 0"),
            (
                self.max_records_per_trigger is None or self.max_records_per_trigger > 0,
                "max_records_per_trigger must be > 0",
            ),
            (self.warmup_batches >= 0, "warmup_batches must be >= 0"),
            (self.urgent_time_lag_s > 0, "urgent_time_lag_s must be > 0"),
            (self.slo_horizon_s >= 0, "slo_horizon_s must be >= 0"),
            (self.decision_interval_s > 0, "decision_interval_s must be > 0"),
            (self.surge_share >= 0, "surge_share must be >= 0"),
        ]
        for ok, message in checks:
            if not ok:
                raise ConfigError(message)


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
    """Records/s arriving in the input topics (the lag tracker's 30 s average)."""
    recent_input_rate: float | None = None
    """Records/s arriving over a short recent window (10 s); None when not measured."""
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
    state_partitions: int | None = None
    """Tasks of the query's narrowest stateful stage (the fewest ``numShufflePartitions`` of
    its stateful operators, fixed at its first start); None for a stateless query."""
    trend_span_s: float = 10.0
    """Seconds between the middles of the two input averages (half the difference of their
    windows: the lag tracker's 30 s and 10 s give 10 s)."""

    def __post_init__(self) -> None:
        if self.trend_span_s <= 0:
            raise ConfigError("trend_span_s must be > 0")
        if self.executors < 0 or self.pending_executors < 0:
            raise ConfigError("executor counts must be >= 0")
        if self.partitions < 1 or self.splits_per_partition < 1:
            raise ConfigError("partitions and splits_per_partition must be >= 1")
        if self.state_partitions is not None and self.state_partitions < 1:
            raise ConfigError("state_partitions must be >= 1 (None for a stateless query)")

    @property
    def arrival_rate(self) -> float:
        """The input rate to size for: the higher of the long and the recent average, so that
        a step up counts at once and a step down only once both averages show it."""
        recent = self.recent_input_rate
        return self.input_rate if recent is None else max(self.input_rate, recent)

    @property
    def input_trend(self) -> float:
        """Records/s by which the input rate rises each second, from the recent average's
        lead over the long one (0 when it does not lead: a fall is not relied upon)."""
        recent = self.recent_input_rate
        if recent is None:
            return 0.0
        return max(0.0, recent - self.input_rate) / self.trend_span_s

    @property
    def total_lag(self) -> int:
        """Records lag summed over partitions."""
        return sum(self.partition_lag)

    @property
    def tasks(self) -> int:
        """Spark tasks per micro-batch: the parallelism the input allows."""
        return self.partitions * self.splits_per_partition

    @property
    def parallel_tasks(self) -> int:
        """Tasks a batch can run at once in every stage: the source's tasks, bounded by the
        narrowest stateful stage (Spark does not spread one state partition over executors,
        as Kafka Streams does not spread one input partition over instances)."""
        if self.state_partitions is None:
            return self.tasks
        return min(self.tasks, self.state_partitions)

    @property
    def parallelism_bound(self) -> str:
        """Which bound :attr:`parallel_tasks` is: ``source tasks`` or ``state partitions``."""
        if self.state_partitions is not None and self.state_partitions < self.tasks:
            return "state partitions"
        return "source tasks"


@dataclass(frozen=True)
class PolicyState:
    """What a policy remembers between decisions (start with ``PolicyState()``)."""

    last_change_s: float | None = None
    last_direction: int = 0
    """+1 after a scale-up, -1 after a scale-down, 0 before any change."""
    clear_since_s: float | None = None
    """Since when fresh metrics have shown no backlog (None: backlog or unknown)."""
    running: int | None = None
    """Executors running at the previous observation (None: none yet)."""
    stable_since_s: float | None = None
    """Since when the executor set has not changed (None: since the query started)."""
    capacity: Capacity | None = None
    """The last capacity fitted on the batches (kept while later batches cannot be fitted)."""
    ridden: int | None = None
    """The count running on the latency budget: chosen by the last scale-down below the rate
    target (:func:`riding_count`), or held short of it (``hold_within_budget``); None after
    any other change."""
    outgrown: tuple[int, float] | None = None
    """A ridden count whose budget ran out, and the input rate then: it is not ridden again
    while the input stays above that rate less the tolerance (a steady input rides once)."""
    changed_from: int | None = None
    """The count before the last change (its pause is priced from both counts)."""
    heard: tuple[float, float] | None = None
    """``(time, arrival rate)`` of the last observation with input: during a silence
    (:func:`silent`), ``rate`` sizes a scale-down for that rate (an outage of the producers
    is not an input that ended), for up to ``catch_up_s``."""
    scaled_for: float | None = None
    """The arrival rate the last scale-up was decided at (the highest of the window), at most
    what the count it asked for carries: the input that count was needed for, which a
    scale-in keeps a way back to (:func:`reserve_holds`)."""
    arrivals: tuple[tuple[float, float], ...] = ()
    """``(time, recent input rate)`` of the steady observations (fresh metrics, no backlog)
    over the last ``stabilization_window_s``: the input's measured noise, which a scale-down
    keeps headroom for (:func:`noisy_rate`)."""
    history: tuple[float, ...] = ()
    """``forecast``: the recent input rate of every decision with fresh metrics, oldest first,
    over the last :data:`FORECAST_HISTORY_S` (what :mod:`.forecast` finds a period in)."""


@dataclass(frozen=True)
class Decision:
    """The executor count to run and why; ``target`` is the policy's unbounded, fractional
    desired count (None when it was not computed)."""

    desired: int
    reason: Reason
    current: int
    target: float | None = field(default=None, compare=False)
    capacity: Capacity | None = field(default=None, compare=False)
    """The capacity estimate of this step (both policies; only ``rate`` sizes with it)."""

    @property
    def direction(self) -> int:
        """+1 scale-up, -1 scale-down, 0 hold."""
        return (self.desired > self.current) - (self.desired < self.current)


def usable_executors(config: PolicyConfig, obs: Observation) -> int:
    """Executors that get tasks (:attr:`Observation.parallel_tasks` / cores per executor):
    more idle."""
    return max(1, math.ceil(obs.parallel_tasks / config.executor_cores))


def upper_bound(config: PolicyConfig, obs: Observation) -> int:
    """Largest useful count: ``max_executors`` capped by tasks per batch, never below min."""
    return max(config.min_executors, min(config.max_executors, usable_executors(config, obs)))


def _in_flight(config: PolicyConfig, obs: Observation) -> float:
    """Records lag that is in-flight work: ``backlog_tolerance_s`` of input, and the floor."""
    return config.backlog_min_records + obs.input_rate * config.backlog_tolerance_s


def has_backlog(config: PolicyConfig, obs: Observation) -> bool:
    """Lag beyond in-flight work: more than ``backlog_tolerance_s`` of input (and the floor)."""
    return obs.total_lag > _in_flight(config, obs)


def urgent_backlog(config: PolicyConfig, obs: Observation) -> bool:
    """A backlog whose time lag exceeds ``urgent_time_lag_s`` (when the time lag is unknown:
    a records lag above that many seconds of input, and the floor)."""
    if not has_backlog(config, obs):
        return False
    if obs.time_lag_s is not None:
        return obs.time_lag_s > config.urgent_time_lag_s
    allowed = config.backlog_min_records + obs.input_rate * config.urgent_time_lag_s
    return obs.total_lag > allowed


def reverses_for_urgency(config: PolicyConfig) -> bool:
    """Whether an urgent backlog may reverse a scale-down inside the window: for ``lag``, as
    the HPA it stands for (no stabilization of a scale-up by default); for ``rate`` only with
    ``reverse_for_slo`` (the objective before the no-reversal rule)."""
    return config.kind is PolicyKind.LAG or config.reverse_for_slo


def slo_at_risk(config: PolicyConfig, obs: Observation, capacity: Capacity) -> bool:
    """``reverse_for_slo``: the input rises (:func:`rising`) and the running count, kept, is
    predicted to let the time lag (a batch cycle included) pass ``urgent_time_lag_s`` over
    ``slo_horizon_s``: the backlog is urgent before the objective is broken. A count that
    proves short at a steady input waits for the observed time lag, as without the option:
    only a change of the input reverses a scale-down early, never its noise. False when the
    option is off, for ``lag``, or without a backlog or a known capacity."""
    if not config.reverse_for_slo or config.kind is not PolicyKind.RATE:
        return False
    if not capacity.known or not has_backlog(config, obs) or not rising(config, obs):
        return False
    return predicted_latency(config, obs, capacity, obs.executors) > config.urgent_time_lag_s


def measure_capacity(
    config: PolicyConfig, obs: Observation, remembered: Capacity | None = None
) -> Capacity:
    """The capacity fitted on ``obs.batches``, else ``remembered`` (as such), else the fit's
    verdict of why not (method ``unknown``, fixed cost alone when only that is measurable)."""
    fitted = cap.fit(
        obs.batches, executors_now=obs.executors, tasks_cap=usable_executors(config, obs)
    )
    if fitted.known:
        return replace(fitted, fitted_s=obs.now_s)
    if remembered is not None and remembered.known:
        return replace(remembered, method=CapacityMethod.REMEMBERED)
    return fitted


def largest_batches(batches: Sequence[BatchSample], share: float = 0.5) -> list[BatchSample]:
    """The batches carrying at least ``share`` of the largest one's records: at lag 0 a
    small batch is mostly fixed cost and would read a fast executor as a slow one."""
    sizes = [b.records for b in batches if b.records > 0 and b.busy_s > 0]
    if not sizes:
        return []
    floor = share * max(sizes)
    return [b for b in batches if b.records >= floor and b.busy_s > 0]


def at_batch_limit(config: PolicyConfig, obs: Observation, share: float = 0.9) -> bool:
    """Recent batches ran at the query's batch limit: the query reads as much as it may, so
    their records over their time is its throughput at that size (fixed cost included)."""
    limit = config.max_records_per_trigger
    return limit is not None and any(b.records >= share * limit for b in obs.batches)


def _metrics_problem(config: PolicyConfig, obs: Observation) -> Reason | None:
    if obs.metrics_age_s is None or len(obs.partition_lag) != obs.partitions:
        return Reason.HOLD_MISSING_METRICS
    values = [obs.input_rate, obs.arrival_rate, obs.processed_rate, obs.metrics_age_s]
    if any(not math.isfinite(v) or v < 0 for v in values) or any(x < 0 for x in obs.partition_lag):
        return Reason.HOLD_MISSING_METRICS
    if obs.metrics_age_s > config.max_metrics_age_s:
        return Reason.HOLD_STALE_METRICS
    return None


def _warm(config: PolicyConfig, stable_since: float | None, obs: Observation) -> bool:
    """Enough batches since the executor set last changed (or an idle query)."""
    if obs.total_lag == 0 and obs.input_rate == 0:
        return True
    if stable_since is None:
        count = len(obs.batches)
    else:
        count = sum(
            1 for b in obs.batches if b.started_s is not None and b.started_s >= stable_since
        )
    return count >= config.warmup_batches


def _saturated(config: PolicyConfig, obs: Observation, capacity: Capacity, executors: int) -> float:
    """Records/s ``executors`` process when saturated, capped by the tasks a batch has."""
    return cap.throughput(
        min(executors, usable_executors(config, obs)),
        capacity,
        trigger_interval_s=config.trigger_interval_s,
        max_records_per_trigger=config.max_records_per_trigger,
    )


def _time_lag(obs: Observation) -> float:
    """The observed time lag, 0 where unknown."""
    lag = obs.time_lag_s
    return lag if lag is not None and math.isfinite(lag) else 0.0


def catch_up_seconds(config: PolicyConfig, obs: Observation, capacity: Capacity) -> float:
    """Within how long the backlog is to be drained: ``catch_up_s``, unless the time lag is
    predicted to pass ``urgent_time_lag_s`` — then what is left until that bound once new
    executors would run (at least 1 s): records drained later would be older than it.

    The prediction, with the current executors' throughput ``Θ`` (:func:`capacity.throughput`),
    the backlog ``L`` beyond in-flight work, the time lag ``τ`` and a scale-up delay ``R``
    (start and pause). When ``Θ`` exceeds the input ``λ``, the backlog drains in ``L / Θ``:
    if its records arrived at the input rate over ``τ`` (``L ≈ λτ``, a sustained overload),
    the last of them waits ``L / Θ`` and the oldest ``τ``; if they arrived at once (a burst,
    ``L ≫ λτ``), the last waits ``τ + L / Θ``. Between the two:
    ``max(τ, L / Θ + τ × max(0, 1 − λτ / L))``. When ``Θ`` does not exceed the input, the time
    lag grows at ``1 − Θ / λ`` until new executors run: ``τ + R × (1 − Θ / λ)``.
    """
    if not has_backlog(config, obs) or not capacity.known:
        return config.catch_up_s
    throughput = _saturated(config, obs, capacity, obs.executors)
    lag = _time_lag(obs)
    reaction = config.scale_up_delay_s + config.restart_pause_s
    arrival = obs.arrival_rate
    if throughput > arrival:
        backlog = max(0.0, obs.total_lag - _in_flight(config, obs))
        burst = max(0.0, 1 - arrival * lag / backlog) if backlog > 0 else 0.0
        peak = max(lag, backlog / throughput + lag * burst)
    else:
        peak = lag + reaction * (1 - throughput / arrival)
    bound = config.urgent_time_lag_s
    if peak <= bound:
        return config.catch_up_s
    return min(config.catch_up_s, max(1.0, bound - lag - reaction))


def _load(
    config: PolicyConfig, obs: Observation, capacity: Capacity, pause_s: float = 0.0
) -> float:
    """Records/s to carry: input at the target utilization, the backlog over the catch-up
    duration, and the input that piles up during a rescale's pause, over it too."""
    catch_up = catch_up_seconds(config, obs, capacity)
    return (
        obs.arrival_rate / config.target_utilization
        + obs.total_lag / catch_up
        + obs.arrival_rate * pause_s / catch_up
    )


SLO_MARGIN = 0.8
"""Share of ``urgent_time_lag_s`` a smaller scale-up may let the predicted time lag reach."""


UNPROCESSED_NOTHING = 1e-6
"""Records left unprocessed that are none: a float remainder of the arrivals (an input of
1e-15 records/s adds less than 4.0's last bit), not a record whose age counts."""


def predicted_peak_time_lag(
    config: PolicyConfig,
    obs: Observation,
    capacity: Capacity,
    executors: int,
    *,
    horizon_s: float | None = None,
    delay_s: float = 0.0,
    rising: float = 0.0,
    paused_s: float = 0.0,
    inputs: Sequence[float] | None = None,
) -> float:
    """Highest time lag over the next ``horizon_s`` seconds (default ``slo_horizon_s``) if
    ``executors`` are asked for in ``delay_s`` seconds and the input goes on at
    ``obs.arrival_rate``, rising by ``rising`` records/s each second, or, given ``inputs``,
    at those rates (one a second from now, the last one after them; ``forecast``'s
    prediction) (requires ``capacity.known``).

    Second by second: the current executors process at their saturated throughput until the
    new ones run (``scale_up_delay_s``), nothing is processed during the rescale pause, then
    the new count's throughput (fewer executors: the pause at once). Records are processed in
    order: the backlog is taken to have arrived evenly over the current time lag, later
    records at the input rate; the time lag is the age of the oldest record not processed.
    """
    current, arrival = obs.executors, obs.arrival_rate
    backlog = float(obs.total_lag)
    lag = _time_lag(obs)
    before = _saturated(config, obs, capacity, current)
    after = _saturated(config, obs, capacity, executors)
    switch = delay_s + (config.scale_up_delay_s if executors > current else 0.0)
    pause = pause_for(config.restart_pause_s, config.state_reload_s, current, executors)
    if executors == current:  # ``paused_s``: what is left of a pause already under way
        switch, pause = 0.0, paused_s
    horizon = config.slo_horizon_s if horizon_s is None else horizon_s
    seconds = math.ceil(horizon)
    arrivals = None if inputs is None else _cumulative(inputs, seconds)
    processed, peak = 0.0, lag
    for second in range(1, seconds + 1):
        if second <= switch:
            rate = before
        elif second <= switch + pause:
            rate = 0.0
        else:
            rate = after
        if arrivals is None:
            arrived = backlog + arrival * second + rising * second**2 / 2
        else:
            arrived = backlog + arrivals[second]
        processed = min(processed + rate, arrived)
        if processed >= arrived - UNPROCESSED_NOTHING:
            age = 0.0  # everything that arrived is processed (also: nothing arrives)
        elif processed < backlog:
            age = second + lag * (1 - processed / backlog)
        elif arrivals is None:
            age = second - _arrived_by(processed - backlog, arrival, rising)
        else:
            age = second - _arrived_when(arrivals, processed - backlog)
        peak = max(peak, age)
    return peak


def _cumulative(inputs: Sequence[float], seconds: int) -> list[float]:
    """Records arrived by each second from 0 to ``seconds`` at ``inputs`` (one rate a second,
    the last one after them; none: nothing arrives)."""
    out = [0.0]
    for second in range(seconds):
        rate = inputs[min(second, len(inputs) - 1)] if inputs else 0.0
        out.append(out[-1] + max(0.0, rate))
    return out


def _arrived_when(arrivals: Sequence[float], records: float) -> float:
    """Seconds until ``records`` had arrived, ``arrivals`` being the records arrived by each
    whole second (interpolated within a second)."""
    index = bisect.bisect_left(arrivals, records)
    if index == 0:
        return 0.0
    before, after = arrivals[index - 1], arrivals[index]
    return index - 1 + (records - before) / (after - before)


def predicted_latency(
    config: PolicyConfig,
    obs: Observation,
    capacity: Capacity,
    executors: int,
    *,
    horizon_s: float | None = None,
    delay_s: float = 0.0,
    inputs: Sequence[float] | None = None,
) -> float:
    """The highest latency a record is predicted to see with ``executors`` asked for in
    ``delay_s`` (requires ``capacity.known``): the peak time lag over the horizon
    (:func:`predicted_peak_time_lag`, the same arguments) and the cycle of the batch it
    waits for (:func:`batch_cycle_s`). What ``rate``'s rules bound: a count they choose
    keeps it within ``SLO_MARGIN × urgent_time_lag_s``, one they must not leave running
    within ``urgent_time_lag_s``."""
    peak = predicted_peak_time_lag(
        config, obs, capacity, executors, horizon_s=horizon_s, delay_s=delay_s, inputs=inputs
    )
    return peak + batch_cycle_s(config, obs, capacity, executors)


def _arrived_by(records: float, arrival: float, rising: float) -> float:
    """Seconds until ``records`` have arrived at ``arrival`` records/s rising by ``rising``
    records/s each second (``inf``: never)."""
    if rising > 0:
        return (math.sqrt(arrival**2 + 2 * rising * records) - arrival) / rising
    if arrival > 0:
        return records / arrival
    return 0.0 if records <= 0 else math.inf


def batch_cycle_s(
    config: PolicyConfig, obs: Observation, capacity: Capacity, executors: int
) -> float:
    """Seconds one micro-batch takes with ``executors`` at the current input (requires
    ``capacity.known``): a record waits up to that long for its batch to end, on top of the
    time lag a continuous model predicts. Saturated (the count carries less than the input),
    a batch at the limit; else the steady cycle ``fixed / (1 − input / (n × rate))``."""
    assert capacity.rate is not None and capacity.fixed_cost_s is not None
    n = min(max(1, executors), usable_executors(config, obs))
    fixed, arrival = capacity.fixed_cost_s, obs.arrival_rate
    limit = config.max_records_per_trigger
    if _saturated(config, obs, capacity, n) <= arrival:
        if limit is None:
            return math.inf
        return max(config.trigger_interval_s, fixed + limit / (n * capacity.rate))
    steady = fixed / (1 - arrival / (n * capacity.rate))
    return max(config.trigger_interval_s, steady)


def _budget(config: PolicyConfig) -> float:
    """The time lag a smaller count may let the prediction reach: ``SLO_MARGIN`` of the
    objective."""
    return SLO_MARGIN * config.urgent_time_lag_s


def _near_enough(
    config: PolicyConfig, obs: Observation, capacity: Capacity, executors: int
) -> bool:
    """``executors`` carry at least ``target_utilization`` of the input when saturated, and the
    input is not rising by more than that margin over ``slo_horizon_s``: a count the input
    outgrows by no more than the sizing margin, now and soon."""
    arrival = obs.arrival_rate
    margin = (1 - config.target_utilization) * arrival
    return (
        arrival > 0
        and obs.input_trend * config.slo_horizon_s <= margin
        and _saturated(config, obs, capacity, executors) >= arrival - margin
    )


def riding_count(
    config: PolicyConfig,
    obs: Observation,
    capacity: Capacity,
    outgrown: tuple[int, float] | None = None,
) -> int | None:
    """The smallest count below the running one that the latency budget lets run for a
    catch-up duration (``catch_up_s``), even if the input slightly outgrows it; or None.

    Such a count carries at least ``target_utilization`` of the input (a deficit within the
    sizing margin), and with it the predicted time lag, a batch's cycle included, stays
    within ``SLO_MARGIN × urgent_time_lag_s`` over ``catch_up_s``: the objective is spent on
    purpose, as the cheapest plan that keeps it would (the benchmark's oracle). Once it runs,
    :func:`_budget_holds` keeps it only while a scale-up at the next decision still meets the
    objective, so it is entered with a whole catch-up duration of budget and left with one
    decision's — the hysteresis that keeps a steady input from flapping between two counts.
    A count the input has ``outgrown`` (a ride whose budget ran out) is not ridden again
    until the input falls below that ride's rate by more than the tolerance.
    """
    if obs.time_lag_s is None:  # a budget is spent only where the time lag is measured
        return None
    lo = max(1, config.min_executors)
    if outgrown is not None and obs.arrival_rate >= outgrown[1] * (1 - config.tolerance):
        lo = max(lo, outgrown[0] + 1)
    # More executors carry more: the first count near enough is the only candidate.
    near = (n for n in range(lo, obs.executors) if _near_enough(config, obs, capacity, n))
    n = next(near, None)
    if n is None:
        return None
    peak = predicted_peak_time_lag(
        config, obs, capacity, n, horizon_s=config.catch_up_s, rising=obs.input_trend
    )
    reserve = batch_cycle_s(config, obs, capacity, n) + pause_for(
        config.restart_pause_s, config.state_reload_s, obs.executors, n
    )
    return n if peak + reserve <= _budget(config) else None


def not_worth_its_pause(
    config: PolicyConfig, obs: Observation, capacity: Capacity, wanted: int
) -> bool:
    """``rate``: a scale-up to ``wanted`` would not lower the predicted peak time lag (a
    batch cycle included), its executors' start and its pause (the state it moves, priced)
    counted, while the running count carries the input: the change costs more latency than
    it saves. A count short of the input is held only where the change is predicted to
    break the time-lag objective and holding to keep it: a shortfall grows the time lag
    without end, so a lower peak over the horizon alone would hold it for ever. The input is
    the recent average when it is below the long one (a surge that has ended: its records
    are in the backlog already, not to come again)."""
    if obs.time_lag_s is None:  # the latency is compared only where it is measured
        return False
    recent = obs.recent_input_rate
    now = obs if recent is None or recent >= obs.input_rate else _with_input(obs, recent)
    current = obs.executors
    if now.arrival_rate <= 0:
        return False
    pause = pause_for(config.restart_pause_s, config.state_reload_s, current, wanted)
    horizon = config.scale_up_delay_s + pause + config.slo_horizon_s

    def peak(n: int) -> float:
        return predicted_latency(config, now, capacity, n, horizon_s=horizon)

    if _saturated(config, now, capacity, current) < now.arrival_rate:
        return peak(current) <= config.urgent_time_lag_s < peak(wanted)
    return peak(current) <= peak(wanted)


def reserve_holds(
    config: PolicyConfig,
    obs: Observation,
    capacity: Capacity,
    executors: int,
    scaled_for: float | None,
) -> bool:
    """``rate``: a scale-in to ``executors`` keeps a way back. Should the input return at
    once to ``scaled_for`` (the rate the last scale-up was decided at), one scale-up from
    ``executors``, decided up to a decision interval later, keeps the predicted time lag
    (a batch cycle included) within ``SLO_MARGIN × urgent_time_lag_s``, its executors' start
    and its pause (the reload of the state it moves, priced from the measured pauses)
    included. Moving state gets dearer as the state grows: the count a query can come back
    from grows with it. Only the state's price binds: True without a remembered rate, when
    ``executors`` carry it, or when no way back would exist without state to reload either
    (a stateless query scales in as the input falls; the input need not come back)."""
    if scaled_for is None or _saturated(config, obs, capacity, executors) >= scaled_for:
        return True
    if config.state_reload_s <= 0:  # nothing to reload: the way back costs what it did
        return True
    return _way_back(config, obs, capacity, executors, scaled_for) or not _way_back(
        replace(config, state_reload_s=0.0), obs, capacity, executors, scaled_for
    )


def surge_holds(config: PolicyConfig, obs: Observation, capacity: Capacity, executors: int) -> bool:
    """``rate``: a scale-down to ``executors`` rides out a surge of ``surge_share`` × the
    input that arrives as it is made and lasts until a scale-up could follow it (the
    stabilization window, then the new executors' start and a change's base pause): the
    predicted time lag, the scale-down's own pause and a batch cycle included, stays within
    ``urgent_time_lag_s``. Always True with ``surge_share`` 0."""
    if config.surge_share <= 0:
        return True
    surge = _with_input(obs, obs.arrival_rate * (1 + config.surge_share))
    horizon = config.stabilization_window_s + config.scale_up_delay_s + config.restart_pause_s
    peak = predicted_latency(config, surge, capacity, executors, horizon_s=horizon)
    return peak <= config.urgent_time_lag_s


def _way_back(
    config: PolicyConfig, obs: Observation, capacity: Capacity, executors: int, rate: float
) -> bool:
    """One scale-up from ``executors``, decided a decision interval after the input jumps to
    ``rate``, keeps the predicted time lag (a batch cycle included) within the budget."""
    surge = replace(
        _with_input(obs, rate),
        executors=executors,
        pending_executors=0,
        partition_lag=(0,) * obs.partitions,
        time_lag_s=0.0,
    )
    delay = config.decision_interval_s
    for up in range(executors + 1, upper_bound(config, obs) + 1):
        pause = pause_for(config.restart_pause_s, config.state_reload_s, executors, up)
        horizon = delay + config.scale_up_delay_s + pause + config.slo_horizon_s
        peak = predicted_latency(config, surge, capacity, up, horizon_s=horizon, delay_s=delay)
        if peak <= _budget(config):
            return True
    return False


def _budget_holds(config: PolicyConfig, obs: Observation, capacity: Capacity, wanted: int) -> bool:
    """The running count, though short of the rate target, may stay: it carries at least
    ``target_utilization`` of the input, and scaling up to ``wanted`` at the next decision
    instead of now still keeps the predicted time lag within the budget over
    ``slo_horizon_s`` after it. (The observed time lag already holds the running count's
    batch cycle: unlike :func:`riding_count`, no cycle is added.)"""
    current = obs.executors
    if obs.time_lag_s is None or not _near_enough(config, obs, capacity, current):
        return False
    delay = config.decision_interval_s
    peak = predicted_peak_time_lag(
        config,
        obs,
        capacity,
        wanted,
        horizon_s=config.slo_horizon_s + delay + config.scale_up_delay_s,
        delay_s=delay,
        rising=obs.input_trend,
    )
    return peak <= _budget(config)


def _rate_target(
    config: PolicyConfig,
    obs: Observation,
    capacity: Capacity,
    pause_s: float,
    *,
    topping_up: bool = False,
) -> float:
    """Executors for the load; a scale-up bounded by the SLO: the fewest executors above the
    current count whose predicted time lag, a batch cycle included, stays within
    ``SLO_MARGIN × urgent_time_lag_s`` for ``slo_horizon_s`` after the change is over (the
    executors' start and the change's pause, its state reload priced in): a short burst
    needs fewer executors than its input rate. That is a bet that the burst is short, taken
    once: a scale-up ``topping_up`` an earlier one (the input outlasted the bet) is bounded
    below by the count that carries the input (:func:`carrying_count`) — another short
    step would cost another start and pause. Where the state's priced reload outweighs the
    change's base pause (``restart_pause_s``) no bet is placed: every scale-up is sized as a
    top-up."""
    target = cap.executors_needed(
        _load(config, obs, capacity, pause_s),
        capacity,
        trigger_interval_s=config.trigger_interval_s,
        max_records_per_trigger=config.max_records_per_trigger,
        max_cycle_s=config.backlog_tolerance_s,
    )
    current = obs.executors
    if config.slo_horizon_s <= 0 or not math.isfinite(target):
        return target
    if target <= current * (1 + config.tolerance):
        return target
    budget = _budget(config)
    if not topping_up:
        for executors in range(current + 1, math.ceil(target - 1e-9)):
            # the horizon covers the state the change reloads (priced), on top of the
            # objective's minute: the bet is placed for a minute, not for the pause
            pause = pause_for(config.restart_pause_s, config.state_reload_s, current, executors)
            horizon = config.slo_horizon_s + max(0.0, pause - config.restart_pause_s)
            peak = predicted_peak_time_lag(config, obs, capacity, executors, horizon_s=horizon)
            if peak <= budget:
                return float(executors)
        return target
    for executors in range(
        max(current + 1, carrying_count(config, obs, capacity)), math.ceil(target - 1e-9)
    ):
        # The horizon starts once the change is over: the executors' start and the pause
        # (its state reload priced in) come first, then ``slo_horizon_s`` of the new count.
        reaction = config.scale_up_delay_s + pause_for(
            config.restart_pause_s, config.state_reload_s, current, executors
        )
        horizon = reaction + config.slo_horizon_s
        if predicted_latency(config, obs, capacity, executors, horizon_s=horizon) <= budget:
            return float(executors)
    return target


def carrying_count(config: PolicyConfig, obs: Observation, capacity: Capacity) -> int:
    """The fewest executors whose saturated throughput carries the input at the target
    utilization (``arrival / target_utilization``), at most the usable count: a scale-up to
    fewer leaves the backlog growing, and the next one costs another start and pause."""
    need = obs.arrival_rate / config.target_utilization
    return _carrying_from(config, obs, capacity, max(1, obs.executors), need)


def _carrying_from(
    config: PolicyConfig, obs: Observation, capacity: Capacity, first: int, rate: float
) -> int:
    """The fewest executors from ``first`` whose saturated throughput is at least ``rate``,
    at most the usable count."""
    most = usable_executors(config, obs)
    for executors in range(first, most + 1):
        if _saturated(config, obs, capacity, executors) >= rate:
            return executors
    return max(first, most)


def _rate_wanted(
    config: PolicyConfig,
    obs: Observation,
    capacity: Capacity,
    up: bool,
    *,
    topping_up: bool = False,
) -> float:
    """Executor count for a change, including the records the change itself lets pile up.

    Up: the smallest count the tolerance rule then keeps (no ceil-induced overshoot); when
    ``topping_up``, not below the count that carries the input.
    Down: a plain ceil, so that the new count runs at or under the target utilization and
    measurement noise cannot push it straight back over the tolerance (no flapping).
    """
    delay = config.scale_up_delay_s if up else 0.0
    top = topping_up and up
    target = _rate_target(config, obs, capacity, config.restart_pause_s + delay, topping_up=top)
    if config.state_reload_s > 0 and math.isfinite(target):
        # The state share the change moves pauses it longer: sized again with that pause.
        moved = pause_for(
            config.restart_pause_s,
            config.state_reload_s,
            obs.executors,
            max(1, math.ceil(target - 1e-9)),
        )
        target = _rate_target(config, obs, capacity, moved + delay, topping_up=top)
    if not math.isfinite(target):
        return math.inf
    if up:
        rounded = math.ceil(target / (1 + config.tolerance) - 1e-9)
        if not top:
            return rounded
        # A top-up rounds down only above the count that carries the input: below it, the
        # rounding would eat the target utilization's margin (a count short of the input,
        # topped up one executor at a time, each step another start and pause).
        carrying = min(carrying_count(config, obs, capacity), math.ceil(target - 1e-9))
        return max(rounded, carrying)
    return math.ceil(target - 1e-9)


def _no_backlog_since(
    config: PolicyConfig, state: PolicyState, obs: Observation, backlog: bool
) -> float | None:
    """Since when the scale-down's no-backlog clock runs (None: stopped), with fresh metrics.

    No backlog: since the first observation without one. A backlog stops the clock, except
    for ``rate`` in the stabilization window after a change (``rate`` restarts the clock at a
    change): the backlog a scale-up was sized to drain, or the one a rescale's pause causes,
    is expected there, so the clock stays at the change; when that backlog is gone by the
    window's end, the window has been the wait. A backlog that outlasts it stops the clock.
    For ``rate``, gone means in time too (time lag within ``backlog_tolerance_s``): after a
    burst, the 30 s input average behind the records allowance (:func:`has_backlog`) is
    inflated. (``decide`` also starts ``rate``'s clock at a backlog its executors no longer
    need.)
    """
    behind = backlog
    if config.kind is PolicyKind.RATE:  # its clock may outlast a backlog: gone in time too
        behind = backlog or _time_lag(obs) > config.backlog_tolerance_s
    if not behind:
        return obs.now_s if state.clear_since_s is None else state.clear_since_s
    changed = state.last_change_s
    if (
        config.kind is PolicyKind.RATE
        and changed is not None
        and state.clear_since_s == changed
        and obs.now_s - changed < config.stabilization_window_s
    ):
        return changed
    return None


def silent(obs: Observation) -> bool:
    """No record arrived over the recent window (the long one when it is not measured)."""
    recent = obs.recent_input_rate
    return (obs.input_rate if recent is None else recent) <= 0


def rising(config: PolicyConfig, obs: Observation) -> bool:
    """The recent input average leads the long one by more than the tolerance: the input is
    rising (a surge starting, a ramp), not wandering within its noise."""
    recent = obs.recent_input_rate
    return recent is not None and recent > obs.input_rate * (1 + config.tolerance)


def _remember_input(
    config: PolicyConfig, state: PolicyState, obs: Observation, backlog: bool
) -> PolicyState:
    """``state`` with this observation's input rate among those of the window when it is
    steady (no backlog: the recent average, else the long one), and its arrival rate as the
    rate last heard unless the input is silent."""
    since = obs.now_s - config.stabilization_window_s
    kept = tuple(a for a in state.arrivals if a[0] > since)
    if not backlog:
        recent = obs.recent_input_rate
        kept = (*kept, (obs.now_s, obs.input_rate if recent is None else recent))
    state = replace(state, arrivals=kept)
    return state if silent(obs) else replace(state, heard=(obs.now_s, obs.arrival_rate))


NOISE_Z = 2.0
"""Standard deviations of the input's measured spread a scale-down keeps as headroom."""


def noisy_rate(config: PolicyConfig, state: PolicyState, obs: Observation) -> float:
    """The arrival rate with headroom for the input's measured noise (``state`` has seen
    ``obs``): ``NOISE_Z`` robust standard deviations of the recent input rates of the
    window's steady observations (no backlog) around their trend, relative to their median
    (:func:`noise_spread`). After a scale-down no scale-up comes for a window (no reversal),
    so the smaller count has to live with the input's wander over one. Only steady
    observations count: a spike, and the backlog it leaves, are not noise (``rate`` sizes for
    them when they come), and a robust spread ignores the odd one."""
    since = obs.now_s - config.stabilization_window_s
    points = [(t, rate) for t, rate in state.arrivals if t > since]
    return obs.arrival_rate * (1 + NOISE_Z * noise_spread(points))


def noise_spread(points: Sequence[tuple[float, float]]) -> float:
    """The relative spread of ``(time, rate)`` points around their trend: 1.4826 × the
    median absolute deviation of the residuals from a Theil–Sen line (the median of the
    pairwise slopes, through the medians), over the median rate; 0 with fewer than three
    points or no rate. A ramp or a daily cycle moves the input but is not noise: measured
    around a flat line, a steady rise would read as spread and keep executors a
    falling input no longer needs (``ramp``, ``diurnal`` and the family's cycles)."""
    if len(points) < 3:  # no spread measured yet
        return 0.0
    middle = statistics.median(rate for _, rate in points)
    if middle <= 0:
        return 0.0
    slopes = [
        (r2 - r1) / (t2 - t1)
        for (t1, r1), (t2, r2) in itertools.combinations(points, 2)
        if t2 != t1
    ]
    slope = statistics.median(slopes) if slopes else 0.0
    centre = statistics.median(t for t, _ in points)
    residuals = [rate - slope * (t - centre) for t, rate in points]
    level = statistics.median(residuals)
    return 1.4826 * statistics.median(abs(x - level) for x in residuals) / middle


def window_peak(config: PolicyConfig, state: PolicyState, obs: Observation) -> float:
    """The highest input rate of the window's steady observations and this one's arrival
    rate (``state`` has seen ``obs``): what a scale-up decided now is for
    (:attr:`PolicyState.scaled_for`). (Sizing a scale-down for it, as the HPA's scale-down
    window does, was tried: it keeps executors after every spike, ``spikes`` 1.50 × the
    oracle; :func:`noisy_rate` keeps headroom for the noise alone.)"""
    since = obs.now_s - config.stabilization_window_s
    rates = [rate for t, rate in state.arrivals if t > since]
    return max([obs.arrival_rate, *rates])


def scale_down_rate(config: PolicyConfig, state: PolicyState, obs: Observation) -> float:
    """The input rate ``rate`` sizes a scale-down for (``state`` has seen ``obs``): the
    arrival rate, and during a silence (:func:`silent`) of up to ``catch_up_s`` the rate last
    heard. Producers that cannot reach the brokers (an outage of the input) come back, often
    with what they held on top of their usual rate: a count removed during their silence
    must be added back as they return, a reversal and late (the warm-up after the change,
    batches of the smaller count). An input silent for longer has ended; and an input that
    merely falls is sized for as it falls."""
    heard = state.heard
    if silent(obs) and heard is not None and obs.now_s - heard[0] <= config.catch_up_s:
        return max(obs.arrival_rate, heard[1])
    return obs.arrival_rate


def _with_input(obs: Observation, rate: float) -> Observation:
    """``obs`` as if both input averages were ``rate`` (no trend)."""
    return replace(obs, input_rate=rate, recent_input_rate=rate)


def outgrown_count(config: PolicyConfig, obs: Observation, capacity: Capacity) -> bool:
    """``rate``: the input alone is more than the executors running and requested carry
    when saturated (a known capacity). No transient of a change explains that — the count is
    too small whatever its next batches measure — so the warm-up and the wait for requested
    executors do not hold it: a scale-up sized at the start of a surge, before the averages
    showed all of it, is topped up at the next decision."""
    if config.kind is not PolicyKind.RATE or not capacity.known:
        return False
    count = obs.executors + obs.pending_executors
    return obs.arrival_rate > _saturated(config, obs, capacity, count) * (1 + config.tolerance)


FORECAST_HISTORY_S = 7200.0
"""Seconds of observed input rates ``forecast`` keeps (two hours: two periods of up to an
hour)."""


def forecast_lead_s(config: PolicyConfig) -> float:
    """How long a scale-up takes to act, seen from a decision: the executors' start, the
    rescale pause and the state reload it costs (priced), and one decision interval (the
    horizon :func:`forecast_counts` looks ahead, before the objective's)."""
    return (
        config.scale_up_delay_s
        + config.restart_pause_s
        + config.state_reload_s
        + config.decision_interval_s
    )


def _remember_rate(config: PolicyConfig, state: PolicyState, obs: Observation) -> PolicyState:
    """``state`` with this observation's input rate at the end of its history."""
    keep = max(1, math.ceil(FORECAST_HISTORY_S / config.decision_interval_s))
    recent = obs.input_rate if obs.recent_input_rate is None else obs.recent_input_rate
    return replace(
        state, history=(*state.history[-(keep - 1) :], recent) if keep > 1 else (recent,)
    )


def forecast_inputs(
    config: PolicyConfig, state: PolicyState, obs: Observation
) -> tuple[float, ...] | None:
    """``forecast``: the input rate predicted for each second of the next
    :func:`forecast_lead_s` plus the stabilization window plus ``slo_horizon_s`` (``state``
    has seen ``obs``); None when off, when no period is found, or when the input now exceeds
    the rate predicted for now by more than the tolerance (a surge the period does not
    explain: the reactive rules size for it)."""
    if not config.forecast or config.kind is not PolicyKind.RATE:
        return None
    step = config.decision_interval_s
    period = fc.find_period(state.history, step)
    if period is None:
        return None
    if obs.arrival_rate > fc.forecast(state.history, period, 0) * (1 + config.tolerance):
        return None
    horizon = forecast_lead_s(config) + config.stabilization_window_s + config.slo_horizon_s
    steps = [fc.forecast(state.history, period, k) for k in range(1, math.ceil(horizon / step) + 1)]
    return tuple(
        steps[min(len(steps) - 1, int(second // step))] for second in range(math.ceil(horizon))
    )


def forecast_counts(
    config: PolicyConfig,
    obs: Observation,
    capacity: Capacity,
    inputs: Sequence[float],
    most: int,
) -> tuple[int | None, int]:
    """``forecast``: what the predicted ``inputs`` ask of the count (``capacity.known``).

    The count to run now: the fewest executors from the running count up to ``most`` that,
    asked for now, keep the predicted time lag (a batch cycle included) within
    ``SLO_MARGIN × urgent_time_lag_s`` over the scale-up's lead (:func:`forecast_lead_s`)
    and ``slo_horizon_s`` after it, the predicted input included; the running count when as
    few asked for at the next decision would do (waiting is cheaper); None when no count
    does (the reactive rules decide). A predicted sale is met by the executors its backlog
    needs, not by its peak rate, and no earlier than waiting costs more executors.

    And the fewest executors a scale-down may go to: those that keep the same bound until a
    scale-up could follow it (the stabilization window, then the lead)."""
    budget = _budget(config)
    current = obs.executors
    lead = forecast_lead_s(config)

    def keeps(n: int, delay: float, horizon: float) -> bool:
        peak = predicted_latency(
            config, obs, capacity, n, horizon_s=horizon, delay_s=delay, inputs=inputs
        )
        return peak <= budget

    horizon = lead + config.slo_horizon_s
    counts = range(current, most + 1)
    now = next((n for n in counts if keeps(n, 0.0, horizon)), None)
    later = next((n for n in counts if keeps(n, config.decision_interval_s, horizon)), None)
    plan = current if now is not None and later is not None and later <= now else now
    down_horizon = config.stabilization_window_s + lead
    lo = max(1, config.min_executors)
    floor = next((m for m in range(lo, current) if keeps(m, 0.0, down_horizon)), current)
    return plan, floor


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
    urgent = backlog and urgent_backlog(config, obs)

    capacity = measure_capacity(config, obs, state.capacity)
    urgent = urgent or (problem is None and slo_at_risk(config, obs, capacity))
    clear_since = None if problem is not None else _no_backlog_since(config, state, obs, backlog)
    set_changed = state.running is not None and state.running != obs.executors
    stable_since = now if set_changed else state.stable_since_s
    remembered = capacity if capacity.method is CapacityMethod.FIT else state.capacity
    state = replace(
        state,
        clear_since_s=clear_since,
        running=obs.executors,
        stable_since_s=stable_since,
        capacity=remembered if problem is None else state.capacity,
    )
    if problem is None:
        state = _remember_input(config, state, obs, backlog)
        if config.forecast:
            state = _remember_rate(config, state, obs)
    inputs = forecast_inputs(config, state, obs) if problem is None else None

    def hold(reason: Reason, target: float | None = None) -> tuple[Decision, PolicyState]:
        return Decision(current, reason, current, target, capacity), state

    def change(
        desired: int, reason: Reason, target: float | None, *, ridden: int | None = None
    ) -> tuple[Decision, PolicyState]:
        direction = 1 if desired > current else -1
        outgrown = state.outgrown
        if direction > 0 and state.ridden == current:  # the ride's budget ran out
            outgrown = (current, obs.arrival_rate)
        new_state = replace(
            state,
            last_change_s=now,
            last_direction=direction,
            stable_since_s=now,
            ridden=ridden,
            outgrown=outgrown,
            changed_from=current,
        )
        if direction > 0 and capacity.known:
            carried = _saturated(config, obs, capacity, desired)
            new_state = replace(new_state, scaled_for=min(window_peak(config, state, obs), carried))
        if config.kind is PolicyKind.RATE:  # the clock restarts at the change (see above)
            new_state = replace(new_state, clear_since_s=now)
        elif direction < 0:  # the executor set changes: the no-backlog clock restarts
            new_state = replace(new_state, clear_since_s=None)
        return Decision(desired, reason, current, target, capacity), new_state

    if current < lo:
        return change(lo, Reason.BOUNDED_MIN, None)
    if current > hi:
        return change(hi, Reason.BOUNDED_MAX, None)
    if problem is not None:
        return hold(problem)
    outgrown = outgrown_count(config, obs, capacity)
    if obs.pending_executors > 0 and not outgrown:
        return hold(Reason.HOLD_SCALING_IN_PROGRESS)
    since_change = math.inf if state.last_change_s is None else now - state.last_change_s
    window = config.stabilization_window_s
    after_down = state.last_direction < 0 and since_change < window
    if current == 0 and (obs.total_lag > 0 or obs.input_rate > 0):
        # Nothing runs, so nothing is measured: start one executor and measure.
        if after_down and not urgent:
            return hold(Reason.HOLD_REVERSAL)
        return change(1, Reason.SCALE_UP_URGENT if after_down else Reason.SCALE_UP_BACKLOG, None)
    warm = _warm(config, stable_since, obs) or outgrown
    if not warm and not (urgent and state.last_direction < 0):
        return hold(Reason.HOLD_WARMING_UP)

    sizing: Capacity | None = None
    if config.kind is PolicyKind.LAG:
        target = _lag_target(config, obs)
    elif obs.arrival_rate <= 0 and obs.total_lag <= 0:
        target = 0.0  # nothing arriving and nothing behind needs no capacity
    else:
        sizing = capacity
        if not sizing.known and (urgent or (backlog and at_batch_limit(config, obs))):
            # Behind, and the fit cannot tell fixed cost from rate (batches of one size, or
            # their times within noise): the largest batches, run at the batch limit while
            # behind, give a rate never above the true one — enough to size a catch-up.
            sizing = cap.lower_bound(
                largest_batches(obs.batches),
                executors_now=obs.executors,
                tasks_cap=usable_executors(config, obs),
            )
        if not sizing.known:
            return hold(Reason.HOLD_UNMEASURED_RATE)
        capacity = sizing
        target = _rate_target(config, obs, sizing, 0.0)
    riding = None
    if sizing is not None and not backlog and current == obs.executors:
        riding = riding_count(config, obs, sizing, state.outgrown)
    plan: int | None = None  # the count the forecast asks for now (None: no plan)
    floor = 0  # the fewest executors the forecast lets a scale-down go to
    if sizing is not None and inputs is not None and not urgent:
        plan, floor = forecast_counts(config, obs, sizing, inputs, hi)
    ahead = plan if plan is not None and plan > current else None
    within = current > 0 and abs(target / current - 1) <= config.tolerance
    if within and riding is None and ahead is None:
        return hold(Reason.HOLD_WITHIN_TOLERANCE, target)
    if sizing is None:
        wanted: float = math.ceil(target - 1e-9)  # the HPA's rounding
    else:
        # The bet on a short burst (the SLO-bounded first step) is placed only where losing
        # it is cheap: where the state's reload (priced from the measured pauses) outweighs
        # a change's base pause, a lost bet's top-up pauses again for the state it moves, at
        # the surge's highest time lag.
        topping_up = (state.last_direction > 0 and since_change < window) or (
            config.state_reload_s > config.restart_pause_s
        )
        wanted = _rate_wanted(config, obs, sizing, up=target > current, topping_up=topping_up)
        if riding is not None:
            wanted = min(wanted, riding)
    if config.kind is PolicyKind.RATE and wanted < current and capacity.known:
        # A silence of the input is sized for as the rate last heard (scale_down_rate): an
        # outage of the producers is not an input that ended. It only ever keeps more
        # executors, never more than run.
        heard = scale_down_rate(config, state, obs)
        if heard > obs.arrival_rate:
            kept = _rate_wanted(config, _with_input(obs, heard), capacity, up=False)
            riding = None
            wanted = min(current, max(wanted, kept))
        if floor > wanted:
            # a rise predicted before a scale-up could follow this scale-down: ride it out
            riding = None
            wanted = min(current, floor)
        # Headroom that survives the input's measured noise: the count kept carries the
        # arrival rate plus its spread (at most ridden on the latency budget at that rate).
        # (A silence rides nothing: see above.)
        peak = noisy_rate(config, state, obs)
        if peak > obs.arrival_rate and wanted < current:
            at_peak = _with_input(obs, peak)
            kept = min(
                _rate_wanted(config, at_peak, capacity, up=False),
                _carrying_from(config, obs, capacity, 1, peak),
            )
            ride = None
            if heard <= obs.arrival_rate:
                ride = riding_count(config, at_peak, capacity, state.outgrown)
            if ride is not None and ride < kept:
                kept = ride
            if kept > wanted:
                riding = ride if ride == kept else None
                wanted = min(current, kept)

    if plan is not None and (ahead is not None or wanted > current):
        # The predicted input decides a scale-up (forecast_counts): the count its backlog
        # needs, once waiting would cost more; none while the running count keeps the bound.
        wanted = plan
    if wanted > current:
        if (
            ahead is None
            and sizing is not None
            and not urgent
            and _budget_holds(config, obs, sizing, int(min(wanted, hi)))
        ):
            state = replace(state, ridden=current)
            return hold(Reason.HOLD_WITHIN_BUDGET, target)
        if (
            ahead is None
            and sizing is not None
            and not_worth_its_pause(config, obs, sizing, int(min(wanted, hi)))
        ):
            # (urgent or not: a change that makes the time lag worse does not help it)
            return hold(Reason.HOLD_PAUSE_COST, target)
        reason = Reason.SCALE_UP_BACKLOG if backlog else Reason.SCALE_UP_RATE
        if after_down:
            if not (urgent and reverses_for_urgency(config)):
                return hold(Reason.HOLD_REVERSAL, target)
            reason = Reason.SCALE_UP_URGENT
        if current >= hi:
            return hold(Reason.BOUNDED_MAX, target)
        step_limit = max(current + 1, math.ceil(current * config.max_up_factor))
        desired = min(wanted, step_limit, hi)
        # The reason says why it scales; a cap at the bound shows as target > desired.
        return change(int(desired), reason, target)

    if wanted < current:
        if backlog:
            if sizing is not None and clear_since is None:
                # rate: the backlog no longer needs these executors (its target, backlog
                # included, is below them): the wait for the scale-down starts here.
                state = replace(state, clear_since_s=now)
            return hold(Reason.HOLD_BACKLOG_DRAINING, target)
        if state.last_direction > 0 and since_change < window:
            return hold(Reason.HOLD_REVERSAL, target)
        if since_change < window or clear_since is None or now - clear_since < window:
            return hold(Reason.HOLD_STABILIZING, target)
        if current <= lo:
            return hold(Reason.BOUNDED_MIN, target)
        floor = math.ceil(current * (1 - config.scale_down_max_factor))
        desired = max(int(wanted), floor, lo)
        if desired >= current:
            return hold(Reason.HOLD_STEADY, target)
        if config.kind is PolicyKind.RATE and capacity.known:
            # The change pauses processing (restart_pause_s, and the reload of the state share
            # it moves, priced from the last changes' measured pauses): the smallest count
            # whose predicted time lag through that pause stays within the margin, or none.
            bound = SLO_MARGIN * config.urgent_time_lag_s
            fits = [
                n
                for n in range(desired, current)
                if predicted_latency(config, obs, capacity, n) <= bound
                and reserve_holds(config, obs, capacity, n, state.scaled_for)
                and surge_holds(config, obs, capacity, n)
            ]
            if not fits:
                return hold(Reason.HOLD_PAUSE_COST, target)
            desired = fits[0]
        ridden = desired if desired == riding else None
        return change(desired, Reason.SCALE_DOWN_IDLE, target, ridden=ridden)

    return hold(Reason.HOLD_STEADY, target)
