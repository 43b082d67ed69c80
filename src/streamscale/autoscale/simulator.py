"""A discrete-time model of a micro-batch streaming cluster, to replay input-rate traces.

Pure and deterministic: the same trace, model and strategy give the same result (the only
randomness, a per-second jitter of executor throughput, comes from ``random.Random(seed)`` and
is drawn once per run, identically for every strategy).

The model, as Spark Structured Streaming runs a query with a processing-time trigger:

- records arrive at the trace's rate, evenly within each second;
- micro-batches: a batch starts at a trigger (every ``trigger_interval_s``, or at once when the
  previous batch overran it) if records are waiting, takes what has arrived up to
  ``max_records_per_trigger``, and lasts ``fixed_cost_s + records / (executors ×
  executor_rate × jitter)``; its records count as processed (lag falls) when it ends. Only
  ``ceil(partitions × splits / cores)`` executors get tasks: the rest idle;
- a requested executor runs ``start_delay_s`` after the request; a killed one stops at once
  (the running batch loses its tasks: it ends ``rescale_pause_s`` later) and is released
  (still billed) ``stop_delay_s`` later;
- whenever the set of running executors changes, no batch starts for ``rescale_pause_s``
  (state-store partitions reload on their new executors), and after executors join, the
  first batch pays ``warmup_s`` more (their Python workers start, caches are cold);
- every ``control_interval_s`` the strategy sees an :class:`~streamscale.autoscale.policy.
  Observation` as the production controller builds it (average input and processed rates
  over the last ``rate_window_s``, the input over the last ``recent_window_s`` or, just after
  a step up, ``latest_window_s`` (:func:`~streamscale.lag.model.step_rate`), the last
  ``batch_history`` batches with their start times, records lag split evenly over
  partitions, time lag) and answers with an executor count — the production
  policy code, :func:`policy.decide`;
- records lag is FIFO: time lag is the age of the oldest unprocessed record;
- a policy starts at the count it settles on for the trace's first rate with no lag, knowing
  the model's capacity as a fit of earlier batches would (a controller that has run for a
  while); with ``cold_start`` it starts at ``min_executors`` knowing nothing (a fresh
  controller, as in the demo). Fixed counts and plans start at theirs.

Figures, one rule for every strategy and the oracle: ``slo_violation_s`` (seconds during which
the time lag exceeds the SLO ``target_time_lag_s``, 30 s by default), ``drain_time_s`` (seconds
above ``caught_up_s``), ``max_lag``, ``max_time_lag_s``, ``executor_seconds`` (running, starting
and stopping executors), ``actions`` (changes of the requested count) and ``reversals``
(consecutive actions of opposite direction less than ``reversal_window_s`` apart).

The oracle (:func:`oracle`) is the cheapest plan found with hindsight that keeps the time lag
under ``target_time_lag_s`` (or, where even ``max_executors`` cannot, no worse than running
``max_executors`` throughout) and ends caught up. It picks one count per control interval,
subject to the same delays, pauses, fixed costs and billing as the policies:

1. greedy forward: at each interval, the smallest count for which the constraint holds until
   the next interval *and* can still be held afterwards by switching to ``max_executors`` (a
   look-ahead run until caught up) — with the trace known, the latest safe moment to add
   capacity and the earliest to remove it. Run for the target and for two tighter ones
   (target / 3 and ``caught_up_s``), whose plans are feasible too and often cheaper to refine;
2. local search from each greedy plan: lower one interval by one executor, lower a run of
   equal counts by one, or set a run to a neighbour's count (merging runs saves rescale
   pauses and start/stop billing); accept any move that keeps the plan feasible and lowers
   its executor-seconds, until none does. The cheapest result wins.

It is a heuristic, not a proven optimum: its cost is an upper bound on the true minimum, so
ratios against it flatter the policies slightly, never the reverse. It spends its whole
latency budget to save executors, so its drain time is long by design.
"""

from __future__ import annotations

import itertools
import math
import random
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from streamscale.autoscale import family, peers, policy
from streamscale.autoscale.capacity import BatchSample, Capacity, CapacityMethod, fit
from streamscale.autoscale.scale_cost import ScaleCost, pause_for, reload_estimate
from streamscale.autoscale.traces import Trace, from_decision_log
from streamscale.errors import ConfigError
from streamscale.lag.model import step_rate

_EPS = 1e-6
_MIN_BATCH_S = 0.01
"""Shortest batch (a bound on the events of one second)."""


@dataclass(frozen=True)
class ClusterModel:
    """The simulated cluster and the measurement conventions (defaults: see docs)."""

    executor_rate: float = 1000.0
    """Records/s one executor processes, net of the fixed cost of its batches."""
    fixed_cost_s: float = 0.5
    """Seconds every micro-batch takes whatever its size (planning, logs, scheduling)."""
    trigger_interval_s: float = 1.0
    """Processing-time trigger (0: batches back to back)."""
    max_records_per_trigger: int | None = None
    """Records one batch takes at most (``maxOffsetsPerTrigger``); None: all waiting."""
    partitions: int = 8
    splits_per_partition: int = 1
    executor_cores: int = 1
    start_delay_s: int = 13
    """Executor request → first task (standalone measured: ~3 s + ~10 s first Python task)."""
    stop_delay_s: int = 5
    """Kill → resources released (billed meanwhile)."""
    rescale_pause_s: int = 5
    """No batch starts for this long after the running set changes (tasks rescheduled),
    plus the reload of the state that moves (below)."""
    state_bytes_per_record: float = 0.0
    """State the query keeps per processed record (0: stateless); it grows up to
    ``state_max_bytes``."""
    state_max_bytes: float = 0.0
    reload_bytes_per_s: float = 50e6
    """Bytes/s a moved state partition reloads at from the checkpoint (RocksDB snapshot and
    changelog replay)."""
    state_reload_s: float = 0.0
    """Seconds to reload the whole state, when the state is not modelled by its size
    (``state_bytes_per_record`` 0): a real run's, calibrated from its decision log."""
    warmup_s: float = 2.0
    """Extra time of the first batch after executors join (Python workers start)."""
    control_interval_s: int = 10
    rate_window_s: int = 30
    """Seconds the observed input and processed rates average over (the lag tracker's
    ``rate_window_s``: a controller sees a 30 s average, not the last interval)."""
    recent_window_s: int = 10
    """Seconds of the recent input rate (the lag tracker's ``recent_window_s``)."""
    latest_window_s: int = 5
    """Seconds of the shorter window that catches a step up sooner (the lag tracker's
    ``latest_window_s``)."""
    metrics_age_s: float = 1.0
    batch_history: int = 64
    """Recent batches the strategy sees (the lag tracker keeps 64)."""
    rate_jitter: float = 0.05
    """Relative spread (uniform ±) of throughput from second to second."""
    seed: int = 0
    metrics_outages: tuple[tuple[int, int], ...] = ()
    """[start, end) seconds during which the strategy gets no metrics."""
    caught_up_s: float = 5.0
    """Time lag above this counts towards the drain time."""
    target_time_lag_s: float = 30.0
    """The SLO on time lag: the oracle's constraint and what violation seconds count."""
    reversal_window_s: float = 60.0
    cold_start: bool = False
    """Policies start at ``min_executors`` knowing nothing (a fresh controller)."""

    def __post_init__(self) -> None:
        if self.executor_rate <= 0 or self.partitions < 1 or self.splits_per_partition < 1:
            raise ConfigError("executor_rate > 0, partitions >= 1, splits >= 1 required")
        counts = (self.executor_cores, self.control_interval_s)
        windows = (self.rate_window_s, self.recent_window_s, self.latest_window_s)
        if min(*counts, *windows) < 1:
            raise ConfigError(
                "executor_cores, control_interval_s, rate_window_s, recent_window_s and "
                "latest_window_s must be >= 1"
            )
        if min(self.start_delay_s, self.stop_delay_s, self.rescale_pause_s) < 0:
            raise ConfigError("delays must be >= 0")
        if min(self.fixed_cost_s, self.trigger_interval_s, self.warmup_s) < 0:
            raise ConfigError("fixed_cost_s, trigger_interval_s and warmup_s must be >= 0")
        if self.max_records_per_trigger is not None and self.max_records_per_trigger < 1:
            raise ConfigError("max_records_per_trigger must be >= 1")
        if self.batch_history < 1:
            raise ConfigError("batch_history must be >= 1")
        if not 0 <= self.rate_jitter < 1:
            raise ConfigError("rate_jitter must be in [0, 1)")
        if min(self.state_bytes_per_record, self.state_max_bytes) < 0:
            raise ConfigError("state_bytes_per_record and state_max_bytes must be >= 0")
        if self.reload_bytes_per_s <= 0 or self.state_reload_s < 0:
            raise ConfigError("reload_bytes_per_s must be > 0 and state_reload_s >= 0")

    def state_bytes(self, processed: float) -> float:
        """The query's state after ``processed`` records."""
        return min(self.state_max_bytes, processed * self.state_bytes_per_record)

    def pause_s(self, before: int, after: int, processed: float) -> float:
        """The pause of a change from ``before`` to ``after`` running executors: the fixed
        rescale pause, plus the reload of the state share that moves
        (:func:`.scale_cost.pause_for`)."""
        reload_s = (
            self.state_bytes(processed) / self.reload_bytes_per_s
            if self.state_bytes_per_record > 0
            else self.state_reload_s
        )
        return pause_for(float(self.rescale_pause_s), reload_s, before, after)

    @property
    def usable_executors(self) -> int:
        """Executors that get tasks: more than that idle."""
        return math.ceil(self.partitions * self.splits_per_partition / self.executor_cores)

    @property
    def capacity(self) -> Capacity:
        """The model's true capacity, as a perfect fit would find it."""
        return Capacity(self.fixed_cost_s, self.executor_rate, CapacityMethod.FIT, 0, "model")

    def policy_config(self, base: policy.PolicyConfig) -> policy.PolicyConfig:
        """``base`` with what the production controller takes from the cluster and the query:
        start delay, rescale pause, trigger interval and batch limit."""
        return replace(
            base,
            executor_cores=self.executor_cores,
            scale_up_delay_s=self.start_delay_s,
            restart_pause_s=self.rescale_pause_s,
            trigger_interval_s=self.trigger_interval_s,
            max_records_per_trigger=self.max_records_per_trigger,
            decision_interval_s=float(self.control_interval_s),
        )


@dataclass(frozen=True)
class Fixed:
    """A constant executor count."""

    executors: int

    @property
    def name(self) -> str:
        return f"fixed:{self.executors}"


@dataclass(frozen=True)
class Plan:
    """One executor count per control interval (the oracle's answer)."""

    executors: tuple[int, ...]
    name: str = "oracle"

    def delayed(self, ticks: int = 1) -> Plan:
        """This plan with every change made ``ticks`` control intervals later (the first
        count held meanwhile): the oracle's plan run by a policy that foresees the input as
        the oracle does but acts that many decisions after it. How often it breaks the
        objective shows how much of the oracle's margin is foresight."""
        if ticks < 0:
            raise ConfigError(f"a plan is delayed by 0 ticks or more, not {ticks}")
        if not self.executors or ticks == 0:
            return self
        kept = min(ticks, len(self.executors))
        late = (self.executors[0],) * kept + self.executors[: len(self.executors) - kept]
        return Plan(late, f"{self.name} {ticks} late")


Strategy = policy.PolicyConfig | Fixed | Plan | peers.Peer[Any, Any]


def strategy_name(strategy: Strategy) -> str:
    """``rate``, ``lag``, ``fixed:N``, a peer's name (:data:`.peers.PEER_NAMES`) or the
    plan's name."""
    if isinstance(strategy, policy.PolicyConfig):
        return strategy.kind.value
    return strategy.name


@dataclass(frozen=True)
class SimDecision:
    """One control step: what ran, what was asked, why, and the capacity the policy saw."""

    t: int
    current: int
    desired: int
    reason: str
    fixed_cost_s: float | None = None
    executor_rate: float | None = None
    reload_s: float | None = None
    """The whole state's reload time the policy priced the decision with (``rate``, ``lag``;
    None for the others)."""


@dataclass(frozen=True)
class Summary:
    """The figures reported per strategy."""

    slo_violation_s: int
    drain_time_s: int
    max_lag: float
    max_time_lag_s: float
    executor_seconds: float
    actions: int
    reversals: int

    def as_dict(self) -> dict[str, float | int]:
        return {
            "slo_violation_s": self.slo_violation_s,
            "drain_time_s": self.drain_time_s,
            "max_lag": round(self.max_lag, 1),
            "max_time_lag_s": round(self.max_time_lag_s, 2),
            "executor_seconds": round(self.executor_seconds, 1),
            "actions": self.actions,
            "reversals": self.reversals,
        }


@dataclass(frozen=True)
class SimResult:
    """Per-second series (index = second) and the control decisions of one run."""

    strategy: str
    input_rate: tuple[float, ...]
    processed: tuple[float, ...]
    lag: tuple[float, ...]
    time_lag_s: tuple[float, ...]
    requested: tuple[int, ...]
    running: tuple[int, ...]
    decisions: tuple[SimDecision, ...]
    batches: tuple[BatchSample, ...] = field(compare=False)
    summary: Summary = field(compare=False)

    def tick_counts(self, interval_s: int) -> tuple[int, ...]:
        """The count requested at each control tick (``interval_s`` apart, from second 0): the
        run as a :class:`Plan` replays it."""
        ticks = (len(self.requested) + interval_s - 1) // interval_s
        return tuple(self.requested[k * interval_s] for k in range(ticks))


class _Cluster:
    """Mutable simulation state; ``copy()`` lets the oracle explore alternatives."""

    __slots__ = (
        "arrived",
        "batch",
        "batches",
        "billed",
        "cum",
        "done",
        "inputs",
        "jitter",
        "lag",
        "model",
        "next_trigger",
        "outputs",
        "pause_sizes",
        "pause_until",
        "pauses",
        "pending",
        "ptr",
        "rates",
        "running",
        "stopping",
        "t",
        "time_lag",
        "warm",
    )

    def __init__(
        self, model: ClusterModel, rates: Sequence[float], jitter: Sequence[float], initial: int
    ) -> None:
        self.model = model
        self.rates = rates
        self.jitter = jitter
        cum = [0.0]
        for r in rates:
            cum.append(cum[-1] + r)
        self.cum: Sequence[float] = cum
        self.t = 0
        self.lag = 0.0
        self.arrived = 0.0
        self.done = 0.0
        self.ptr = 0
        self.time_lag = 0.0
        self.running = initial
        self.pending: list[tuple[int, int]] = []
        self.stopping: list[tuple[int, int]] = []
        self.pause_until = 0.0
        self.pauses: list[tuple[float, int, int]] = []
        """``(pause, before, after)`` of every change so far (what a controller measures)."""
        self.pause_sizes: list[float] = []
        """The state's bytes at each of those changes (what a controller reads from the
        query's state operators)."""
        self.billed = 0.0
        self.inputs: list[float] = []
        self.outputs: list[float] = []
        self.batches: list[BatchSample] = []
        self.batch: tuple[float, float, float, int] | None = None
        """The running batch: (start, end, records, executors)."""
        self.next_trigger = 0.0
        self.warm = True
        """False until the first batch after executors joined has started."""

    def copy(self) -> _Cluster:
        other = _Cluster.__new__(_Cluster)
        for name in _Cluster.__slots__:
            setattr(other, name, getattr(self, name))
        other.pending = list(self.pending)
        other.stopping = list(self.stopping)
        other.pauses = self.pauses[-3:]
        other.pause_sizes = self.pause_sizes[-3:]
        # Histories are only read over the rate windows: keep them short in copies.
        keep = max(self.model.control_interval_s, self.model.rate_window_s)
        other.inputs = self.inputs[-keep:]
        other.outputs = self.outputs[-keep:]
        other.batches = self.batches[-self.model.batch_history :]
        return other

    @property
    def requested(self) -> int:
        return self.running + sum(n for _, n in self.pending)

    def request(self, desired: int) -> None:
        """Apply a new requested total at the start of the current second."""
        t = self.t
        current = self.requested
        if desired > current:
            self.pending.append((t + self.model.start_delay_s, desired - current))
        elif desired < current:
            excess = current - desired
            while excess and self.pending:  # cancel requests not yet granted, newest first
                ready, n = self.pending.pop()
                if n > excess:
                    self.pending.append((ready, n - excess))
                    excess = 0
                else:
                    excess -= n
            if excess:
                self.running -= excess
                self.stopping.append((t + self.model.stop_delay_s, excess))
                pause = self._rescaled(float(t), self.running + excess)
                if self.batch is not None:  # its tasks on the killed executors run again
                    start, end, records, n = self.batch
                    if self.running > 0:
                        self.batch = (start, end + pause, records, n)
                    else:
                        self.batch = None

    def _rescaled(self, when: float, before: int) -> float:
        """The running set changed from ``before``: no batch starts during its pause."""
        pause = self.model.pause_s(before, self.running, self.done)
        self.pauses.append((pause, before, self.running))
        self.pause_sizes.append(self.model.state_bytes(self.done))
        self.pause_until = max(self.pause_until, when + pause)
        return pause

    def observe(self, now: int) -> policy.Observation:
        model = self.model
        window = model.rate_window_s
        recent = self.inputs[-model.recent_window_s :]
        latest = self.inputs[-model.latest_window_s :]
        inputs = self.inputs[-window:]
        outputs = self.outputs[-window:]
        total = round(self.lag)
        share, extra = divmod(total, model.partitions)
        lags = tuple(share + (1 if i < extra else 0) for i in range(model.partitions))
        outage = any(start <= now < end for start, end in model.metrics_outages)
        return policy.Observation(
            now_s=float(now),
            executors=self.running,
            pending_executors=sum(n for _, n in self.pending),
            partitions=model.partitions,
            splits_per_partition=model.splits_per_partition,
            partition_lag=lags,
            input_rate=sum(inputs) / len(inputs) if inputs else 0.0,
            recent_input_rate=(
                step_rate(sum(recent) / len(recent), sum(latest) / len(latest)) if recent else None
            ),
            processed_rate=sum(outputs) / len(outputs) if outputs else 0.0,
            batches=tuple(self.batches[-model.batch_history :]),
            metrics_age_s=None if outage or not inputs else model.metrics_age_s,
            time_lag_s=self.time_lag,
            trend_span_s=max(1.0, (window - model.recent_window_s) / 2),
        )

    def _arrived_at(self, when: float) -> float:
        t = self.t
        return self.cum[t] + self.rates[t] * (when - t)

    def _start_batch(self, when: float) -> None:
        model = self.model
        working = min(self.running, model.usable_executors)
        waiting = math.floor(self._arrived_at(when) - self.done + _EPS)
        if model.max_records_per_trigger is not None:
            waiting = min(waiting, model.max_records_per_trigger)
        if waiting < 1:  # no new data: no batch, the next trigger looks again
            self.next_trigger = when + max(model.trigger_interval_s, 0.1)
            return
        rate = working * model.executor_rate * self.jitter[self.t]
        duration = model.fixed_cost_s + waiting / rate + (0.0 if self.warm else model.warmup_s)
        self.warm = True
        self.batch = (when, when + max(duration, _MIN_BATCH_S), waiting, working)

    def _end_batch(self) -> None:
        assert self.batch is not None
        start, end, records, n = self.batch
        self.done += records
        self.batches.append(BatchSample(int(records), end - start, n, start))
        self.batch = None
        interval = self.model.trigger_interval_s
        aligned = (math.floor(start / interval + _EPS) + 1) * interval if interval > 0 else end
        self.next_trigger = max(end, aligned)

    def step(self) -> None:
        """Simulate the current second and advance."""
        t = self.t
        model = self.model
        if self.pending and self.pending[0][0] <= t:
            joined = [p for p in self.pending if p[0] <= t]
            self.pending = [p for p in self.pending if p[0] > t]
            before = self.running
            self.running += sum(n for _, n in joined)
            self._rescaled(float(t), before)
            self.warm = False
        if self.stopping and self.stopping[0][0] <= t:
            self.stopping = [s for s in self.stopping if s[0] > t]
        self.billed += self.running + sum(n for _, n in self.pending)
        self.billed += sum(n for _, n in self.stopping)
        done_before = self.done
        end_of_second = t + 1.0
        for _ in range(int(2 / _MIN_BATCH_S) + 4):  # bounded: each pass ends or starts a batch
            if self.batch is not None:
                if self.batch[1] > end_of_second:
                    break
                self._end_batch()
                continue
            start = max(self.next_trigger, self.pause_until, float(t))
            if start >= end_of_second or min(self.running, model.usable_executors) <= 0:
                break
            self._start_batch(start)
        arriving = self.rates[t]
        processed = self.done - done_before
        self.arrived += arriving
        self.lag = max(0.0, self.arrived - self.done)
        self.inputs.append(arriving)
        self.outputs.append(processed)
        # FIFO time lag at the end of second t: age of the oldest unprocessed record (a
        # fraction of a record is not one: batches take whole records).
        if self.lag < 1:
            self.time_lag = 0.0
        else:
            # The oldest whole record arrived when its last part did (batches take whole
            # records): a fraction left at the head waits for the next arrivals.
            position = min(self.done + 1.0, self.arrived)
            cum = self.cum
            ptr = self.ptr
            while ptr + 1 < len(cum) and cum[ptr + 1] <= position:
                ptr += 1
            self.ptr = ptr
            rate = self.rates[ptr] if ptr < len(self.rates) else 0.0
            oldest = ptr + ((position - cum[ptr]) / rate if rate > 0 else 0.0)
            self.time_lag = max(0.0, t + 1 - oldest)
        self.t = t + 1


def _jitter(model: ClusterModel, seconds: int) -> tuple[float, ...]:
    rng = random.Random(model.seed)
    spread = model.rate_jitter
    return tuple(1.0 + rng.uniform(-spread, spread) for _ in range(seconds))


Decider = Callable[[policy.Observation, float], SimDecision]
"""A strategy's decision on an observation, given the whole state's reload time it prices a
change with."""


def _decider(strategy: Strategy, model: ClusterModel, first_rate: float) -> tuple[int, Decider]:
    """Initial executor count and a stateful decision function for a strategy."""
    if isinstance(strategy, Fixed):
        n = strategy.executors

        def fixed(obs: policy.Observation, reload_s: float) -> SimDecision:
            return SimDecision(int(obs.now_s), obs.executors + obs.pending_executors, n, "fixed")

        return n, fixed
    if isinstance(strategy, Plan):
        plan = strategy.executors
        interval = model.control_interval_s

        def follow(obs: policy.Observation, reload_s: float) -> SimDecision:
            k = min(int(obs.now_s) // interval, len(plan) - 1)
            return SimDecision(
                int(obs.now_s), obs.executors + obs.pending_executors, plan[k], "plan"
            )

        return plan[0], follow
    if isinstance(strategy, peers.Peer):
        return _peer_decider(strategy, model, first_rate)
    config = strategy
    if model.cold_start:
        initial = max(1, config.min_executors)
        state = policy.PolicyState()
    else:
        initial = _warm_start(config, model, first_rate)
        state = policy.PolicyState(capacity=model.capacity, running=initial)

    def decide(obs: policy.Observation, reload_s: float) -> SimDecision:
        nonlocal state
        priced = replace(config, state_reload_s=reload_s)
        decision, state = policy.decide(priced, state, obs)
        fit = decision.capacity
        return SimDecision(
            int(obs.now_s),
            decision.current,
            decision.desired,
            decision.reason.value,
            None if fit is None else fit.fixed_cost_s,
            None if fit is None else fit.rate,
            reload_s,
        )

    return initial, decide


def _peer_decider(
    peer: peers.Peer[Any, Any], model: ClusterModel, first_rate: float
) -> tuple[int, Decider]:
    """A peer starts where ``rate`` starts (the count a cluster sized for the trace's first
    rate runs, or ``min_executors`` on a cold start), then decides with its own rule."""
    base: policy.PolicyConfig = peer.config.base
    initial = max(1, base.min_executors)
    if not model.cold_start:
        initial = _warm_start(replace(base, kind=policy.PolicyKind.RATE), model, first_rate)
    state = peer.state

    def decide(obs: policy.Observation, reload_s: float) -> SimDecision:
        nonlocal state
        decision, state = peer.decide(peer.config, state, obs)
        return SimDecision(
            int(obs.now_s), decision.current, decision.desired, decision.reason.value
        )

    return initial, decide


def _warm_start(config: policy.PolicyConfig, model: ClusterModel, rate: float) -> int:
    """Steady count the policy picks for ``rate`` with no lag, knowing the model's capacity
    (the state before the trace)."""
    current = max(1, config.min_executors)
    for _ in range(8):
        working = min(current, model.usable_executors)
        cycle = max(model.trigger_interval_s, model.fixed_cost_s * 2, 1.0)
        records = max(1, round(rate * cycle))
        busy = model.fixed_cost_s + records / (working * model.executor_rate)
        samples = tuple(BatchSample(records, busy, working, -cycle * (i + 1)) for i in range(8))
        obs = policy.Observation(
            now_s=0.0,
            executors=current,
            partitions=model.partitions,
            splits_per_partition=model.splits_per_partition,
            partition_lag=(0,) * model.partitions,
            input_rate=rate,
            processed_rate=rate,
            batches=samples if rate > 0 else (),
            metrics_age_s=0.0,
        )
        state = policy.PolicyState(capacity=model.capacity, clear_since_s=-math.inf)
        decision, _ = policy.decide(config, state, obs)
        if decision.desired == current:
            break
        current = decision.desired
    return current


def _summary(
    model: ClusterModel,
    lag: Sequence[float],
    time_lag: Sequence[float],
    billed: float,
    decisions: Sequence[SimDecision],
) -> Summary:
    actions = [d for d in decisions if d.desired != d.current]
    reversals = 0
    for prev, cur in itertools.pairwise(actions):
        opposite = (cur.desired - cur.current) * (prev.desired - prev.current) < 0
        if opposite and cur.t - prev.t < model.reversal_window_s:
            reversals += 1
    return Summary(
        slo_violation_s=sum(1 for x in time_lag if x > model.target_time_lag_s + _EPS),
        drain_time_s=sum(1 for x in time_lag if x > model.caught_up_s),
        max_lag=max(lag, default=0.0),
        max_time_lag_s=max(time_lag, default=0.0),
        executor_seconds=billed,
        actions=len(actions),
        reversals=reversals,
    )


def simulate(trace: Trace, model: ClusterModel, strategy: Strategy) -> SimResult:
    """Replay ``trace`` on ``model`` under ``strategy``; deterministic."""
    rates = trace.per_second()
    jitter = _jitter(model, len(rates))
    initial, decide = _decider(strategy, model, rates[0])
    cluster = _Cluster(model, rates, jitter, initial)
    lag: list[float] = []
    time_lag: list[float] = []
    requested: list[int] = []
    running: list[int] = []
    decisions: list[SimDecision] = []
    for t in range(len(rates)):
        if t > 0 and t % model.control_interval_s == 0:
            # priced as the controller prices it: from the pauses of the last changes, scaled
            # by the state's growth since
            reload_s = reload_estimate(
                cluster.pauses,
                float(model.rescale_pause_s),
                cluster.pause_sizes,
                model.state_bytes(cluster.done),
            )
            decision = decide(cluster.observe(t), reload_s)
            decisions.append(decision)
            cluster.request(decision.desired)
        cluster.step()
        lag.append(cluster.lag)
        time_lag.append(cluster.time_lag)
        requested.append(cluster.requested)
        running.append(cluster.running)
    summary = _summary(model, lag, time_lag, cluster.billed, decisions)
    return SimResult(
        strategy=strategy_name(strategy),
        input_rate=rates,
        processed=tuple(cluster.outputs),
        lag=tuple(lag),
        time_lag_s=tuple(time_lag),
        requested=tuple(requested),
        running=tuple(running),
        decisions=tuple(decisions),
        batches=tuple(cluster.batches),
        summary=summary,
    )


# --- oracle -----------------------------------------------------------------------------


class _Check:
    """The oracle's constraint: time lag under the target, or no worse than ``hi`` throughout."""

    def __init__(self, model: ClusterModel, reference: Sequence[float], target: float) -> None:
        self.limit = [max(target, r) + _EPS for r in reference]
        self.end_limit = max(model.caught_up_s, reference[-1]) + _EPS

    def ok(self, cluster: _Cluster) -> bool:
        """Check the second just simulated (and the end state, after the last one)."""
        t = cluster.t - 1
        if cluster.time_lag > self.limit[t]:
            return False
        return cluster.t < len(self.limit) or cluster.time_lag <= self.end_limit


def _run_interval(cluster: _Cluster, desired: int, check: _Check | None) -> bool:
    """Request ``desired`` at a tick and simulate to the next one; False on a violation."""
    if cluster.t > 0:
        cluster.request(desired)
    end = min(len(cluster.rates), cluster.t + cluster.model.control_interval_s)
    ok = True
    while cluster.t < end:
        cluster.step()
        if check is not None and not check.ok(cluster):
            ok = False
    return ok


def _settled(cluster: _Cluster) -> bool:
    """Caught up, nothing pending, no pause: micro-batches keep some records in flight."""
    caught_up = cluster.time_lag <= cluster.model.caught_up_s
    return caught_up and not cluster.pending and cluster.t >= cluster.pause_until


def _safe_after(cluster: _Cluster, hi: int, check: _Check) -> bool:
    """Can the constraint still be held by switching to ``hi`` now and keeping it?"""
    probe = cluster.copy()
    while probe.t < len(probe.rates):
        if not _run_interval(probe, hi, check):
            return False
        if _settled(probe) and probe.running == hi:
            return True
    return True


def _plan_run(
    model: ClusterModel, rates: Sequence[float], jitter: Sequence[float], plan: Sequence[int]
) -> list[_Cluster]:
    """Snapshots of the cluster at every tick (before its decision) under ``plan``."""
    cluster = _Cluster(model, rates, jitter, plan[0])
    snapshots = []
    for desired in plan:
        snapshots.append(cluster.copy())
        _run_interval(cluster, desired, None)
    snapshots.append(cluster)
    return snapshots


def _cost_from(
    snapshots: Sequence[_Cluster], plan: Sequence[int], k: int, check: _Check
) -> float | None:
    """Executor-seconds of ``plan`` (which differs from the snapshots' plan from interval
    ``k`` on), or None when it breaks the constraint."""
    model, rates, jitter = snapshots[0].model, snapshots[0].rates, snapshots[0].jitter
    cluster = _Cluster(model, rates, jitter, plan[0]) if k == 0 else snapshots[k].copy()
    for i in range(k, len(plan)):
        if not _run_interval(cluster, plan[i], check):
            return None
    return cluster.billed


def _segments(plan: Sequence[int]) -> list[tuple[int, int]]:
    """[start, end) index ranges of runs of equal counts."""
    runs: list[tuple[int, int]] = []
    start = 0
    for i in range(1, len(plan) + 1):
        if i == len(plan) or plan[i] != plan[start]:
            runs.append((start, i))
            start = i
    return runs


def _improve(plan: list[int], lo: int, check: _Check, snapshots: list[_Cluster]) -> list[int]:
    """Local search: accept any move that keeps the plan feasible and lowers its cost.

    Moves: lower one interval by one; lower a whole run of equal counts by one; set a run to
    its left or right neighbour's count (merging runs saves the pauses between them).
    """
    model, rates, jitter = snapshots[0].model, snapshots[0].rates, snapshots[0].jitter
    cost = snapshots[-1].billed
    for _ in range(50):  # passes; each accepted move strictly lowers the cost
        improved = False
        moves: list[tuple[int, int, int]] = []  # (start, end, new count), on the pass's plan
        runs = _segments(plan)
        for index, (start, end) in enumerate(runs):
            options = {plan[start] - 1}
            if index > 0:
                options.add(plan[runs[index - 1][0]])
            if index + 1 < len(runs):
                options.add(plan[runs[index + 1][0]])
            moves += [(start, end, option) for option in sorted(options)]
        moves += [(k, k + 1, plan[k] - 1) for k in range(len(plan))]
        for start, end, option in moves:
            if option < lo or all(plan[i] == option for i in range(start, end)):
                continue
            trial = [*plan[:start], *[option] * (end - start), *plan[end:]]
            trial_cost = _cost_from(snapshots, trial, start, check)
            if trial_cost is not None and trial_cost < cost - _EPS:
                plan, cost = trial, trial_cost
                snapshots[:] = _plan_run(model, rates, jitter, plan)
                improved = True
        if not improved:
            break
    return plan


def oracle(trace: Trace, model: ClusterModel, min_executors: int, max_executors: int) -> Plan:
    """The cheapest plan found with hindsight (method in the module docstring)."""
    rates = trace.per_second()
    jitter = _jitter(model, len(rates))
    interval = model.control_interval_s
    ticks = math.ceil(len(rates) / interval)
    lo = max(1, min_executors)
    hi = max(lo, min(max_executors, model.usable_executors))

    reference = simulate(trace, model, Plan((hi,) * ticks)).time_lag_s
    check = _Check(model, reference, model.target_time_lag_s)
    best: tuple[float, list[int]] | None = None
    # Greedy plans for tighter targets are feasible too and often a better start.
    starts = sorted({model.target_time_lag_s, model.target_time_lag_s / 3, model.caught_up_s})
    for start_target in starts:
        if start_target > model.target_time_lag_s:
            continue
        plan = _greedy(model, rates, jitter, lo, hi, _Check(model, reference, start_target))
        snapshots = _plan_run(model, rates, jitter, plan)
        if _cost_from(snapshots, plan, 0, check) is None:
            continue
        plan = _improve(plan, lo, check, snapshots)
        cost = _plan_run(model, rates, jitter, plan)[-1].billed
        if best is None or cost < best[0]:
            best = (cost, plan)
    return Plan(tuple(best[1] if best is not None else [hi] * ticks))


def _greedy(
    model: ClusterModel,
    rates: Sequence[float],
    jitter: Sequence[float],
    lo: int,
    hi: int,
    check: _Check,
) -> list[int]:
    """Forward pass: the smallest count per interval that keeps the plan completable."""
    ticks = math.ceil(len(rates) / model.control_interval_s)
    plan: list[int] = []
    cluster: _Cluster | None = None
    for _ in range(ticks):
        chosen = hi
        for n in range(lo, hi + 1):
            trial = _Cluster(model, rates, jitter, n) if cluster is None else cluster.copy()
            if _run_interval(trial, n, check) and _safe_after(trial, hi, check):
                chosen = n
                break
        plan.append(chosen)
        if cluster is None:
            cluster = _Cluster(model, rates, jitter, chosen)
        _run_interval(cluster, chosen, None)
    return plan


def resolve(name: str, config: policy.PolicyConfig, trace: Trace, model: ClusterModel) -> Strategy:
    """A strategy from its CLI name: ``rate``, ``lag``, a peer (:data:`.peers.PEER_NAMES`),
    ``fixed:N`` or ``oracle``.

    ``rate`` and ``lag`` use ``config`` with its kind replaced; a peer runs within its
    bounds, with what the cluster measured (:func:`.peers.named`); ``oracle`` is computed for
    ``trace`` within the config's bounds. Raises ValueError with a one-line message.
    """
    if name in ("rate", "lag"):
        return replace(config, kind=policy.PolicyKind(name))
    if name in peers.PEER_NAMES:
        return peers.named(name, config, model.executor_rate, model.fixed_cost_s)
    if name == "oracle":
        return oracle(trace, model, config.min_executors, config.max_executors)
    if name.startswith("fixed:"):
        try:
            n = int(name.removeprefix("fixed:"))
        except ValueError:
            n = -1
        if n < 1:
            raise ConfigError(f"{name}: fixed:N needs a whole number of executors >= 1")
        return Fixed(n)
    known = ", ".join(("rate", "lag", *peers.PEER_NAMES, "fixed:N", "oracle"))
    raise ConfigError(f"{name}: unknown policy ({known})")


def comparison_names(config: policy.PolicyConfig) -> tuple[str, ...]:
    """Every strategy of a side-by-side comparison: ``rate``, ``lag``, the peers, the fixed
    counts at the bounds, the oracle last."""
    low = max(1, config.min_executors)
    fixed = (f"fixed:{low}", f"fixed:{config.max_executors}")
    return ("rate", "lag", *peers.PEER_NAMES, *fixed, "oracle")


# --- scenarios and calibration ----------------------------------------------------------


@dataclass(frozen=True)
class Scenario:
    """The cluster and bounds a trace is meant for."""

    model: ClusterModel
    min_executors: int = 1
    max_executors: int = 8
    stabilization_window_s: float = 60.0

    def policy_config(self, base: policy.PolicyConfig | None = None) -> policy.PolicyConfig:
        """``base`` (default: the policy defaults) with this scenario's bounds, window and
        cluster-measured parameters."""
        config = replace(
            base or policy.PolicyConfig(),
            min_executors=self.min_executors,
            max_executors=self.max_executors,
            stabilization_window_s=self.stabilization_window_s,
        )
        return self.model.policy_config(config)


GENERIC = Scenario(ClusterModel(max_records_per_trigger=20_000))
"""The scenario of ``step``, ``ramp``, ``spikes``, ``diurnal`` and CSV traces: 8 partitions,
1..8 executors of 1 000 records/s with a 0.5 s fixed cost per batch, a 1 s trigger and
``maxOffsetsPerTrigger`` 20 000 (without a batch limit, a backlog becomes one long batch that
executors added meanwhile cannot share, as in Spark)."""

DEMO = Scenario(
    ClusterModel(
        executor_rate=20_000.0,
        fixed_cost_s=0.74,
        trigger_interval_s=1.0,
        max_records_per_trigger=20_000,
        partitions=8,
        start_delay_s=11,
        stop_delay_s=1,
        rescale_pause_s=1,
        warmup_s=3.0,
        control_interval_s=5,
        reversal_window_s=30.0,
        cold_start=True,
    ),
    min_executors=1,
    max_executors=2,
    stabilization_window_s=30.0,
)
"""``streamscale demo`` with its defaults on the 2-core machine: two topics of 4 partitions,
1..2 executors of 1 core, 1 s trigger, ``maxOffsetsPerTrigger`` 20 000, a decision every 5 s,
a 30 s window, a fresh controller. Fixed cost (0.74 s per batch), rate (20 000 records/s per
executor) and start delay (11 s) calibrated (:func:`calibrate`) on the decision log of a real
``streamscale demo`` run at its defaults on the 2-core machine (2026-11-24, Spark's connector;
``tests/unit/autoscale/demo_decisions.jsonl``): its 45 batches at the 20 000 limit and 8 at
lag 0 with two executors; stop (1 s), pause (1 s, measured when game sessions kept their
state on the driver) and warm-up (3 s: Python workers) as measured on the local cluster
(docs/benchmarks.md). Not yet recalibrated on the state store: there the demo measured
pauses of 6.6 s (scale-out) and 7.4 s (scale-in) (2026-11-26,
``tests/integration/test_demo.py``)."""

STATEFUL = Scenario(
    ClusterModel(
        max_records_per_trigger=20_000,
        state_bytes_per_record=250.0,
        state_max_bytes=2e9,
        reload_bytes_per_s=25e6,
    )
)
"""The ``stateful`` trace's cluster: :data:`GENERIC`'s, running a query that keeps 250 bytes
of state per record processed (up to 2 GB, about 8 million records: sessions or a table
that keep growing), reloaded at 25 MB/s when it moves. A change that moves the whole state
would pause for 80 s at its largest; a scale-out from 2 to 3 executors moves a third."""

SCENARIOS: dict[str, Scenario] = {"demo": DEMO, "stateful": STATEFUL}

SCENARIO_NAMES = ("generic", *sorted(SCENARIOS))
"""Every cluster :func:`scenario_named` knows."""


def scenario_for(trace_name: str) -> Scenario:
    """The built-in scenario of a trace (:data:`GENERIC` for those without one)."""
    return SCENARIOS.get(trace_name, GENERIC)


def scenario_named(name: str) -> Scenario:
    """A cluster by name: ``generic`` (:data:`GENERIC`) or a key of :data:`SCENARIOS`; any
    trace runs on any of them (``stateful``: the same input, with state that moves)."""
    if name == "generic":
        return GENERIC
    if name not in SCENARIOS:
        raise ConfigError(f"{name}: unknown scenario ({', '.join(SCENARIO_NAMES)})")
    return SCENARIOS[name]


@dataclass(frozen=True)
class Calibration:
    """What a real run's decision log says about the cluster (None: not in the log)."""

    capacity: Capacity
    batches: int
    control_interval_s: float | None
    start_delay_s: float | None
    """Median time from an applied scale-up to the first record with that many running."""
    pauses: tuple[ScaleCost, ...] = ()
    """Every scale event the run's controller measured (``scale_costs``): :meth:`apply` sets
    the model's whole-state reload time to the mean of their state parts (the time their
    stateful operators spent loading state, :attr:`.scale_cost.ScaleCost.state_s`) over the
    share of the state each moved, as the controller prices them."""

    def apply(self, model: ClusterModel) -> ClusterModel:
        """``model`` with every measured parameter replaced; a ValueError when the log does
        not measure the capacity (the simulator never invents one)."""
        if not self.capacity.known:
            raise ConfigError(
                f"the decision log does not measure the capacity: {self.capacity.note}"
            )
        assert self.capacity.rate is not None and self.capacity.fixed_cost_s is not None
        changes: dict[str, object] = {
            "executor_rate": self.capacity.rate,
            "fixed_cost_s": self.capacity.fixed_cost_s,
        }
        if self.control_interval_s is not None:
            changes["control_interval_s"] = max(1, round(self.control_interval_s))
        if self.start_delay_s is not None:
            changes["start_delay_s"] = max(0, round(self.start_delay_s))
        if self.pauses:
            # every measured change's whole-state reload, from the state it loaded
            estimates = [
                reload_estimate([(c.state_s, c.before, c.after)], 0.0)
                for c in self.pauses
                if c.prices
            ]
            if estimates:
                changes["state_reload_s"] = statistics.mean(estimates)
        return replace(model, **changes)  # type: ignore[arg-type]


def _calibration_fit(batches: Sequence[BatchSample]) -> Capacity:
    """Fixed cost and rate at the executor count that ran the most batches (on 2 cores the
    per-batch overhead shrinks as executors are added — it is mostly per task — so counts are
    not pooled): the production fit, else the line through the medians of the large (over
    half the largest) and the small (under a quarter) batches, a run at the batch limit and
    at lag 0 being two such clusters too alike in spread for the fit's significance test."""
    by_count: dict[int, list[BatchSample]] = {}
    for batch in batches:
        if batch.records > 0 and batch.busy_s > 0:
            by_count.setdefault(batch.executors or 1, []).append(batch)
    if not by_count:
        return fit(batches, executors_now=1, tasks_cap=1)
    count, same = max(by_count.items(), key=lambda item: (len(item[1]), item[0]))
    capacity = fit(same, executors_now=count, tasks_cap=count)
    if capacity.known:
        return capacity
    top = max(b.records for b in same)
    large = [b for b in same if b.records > top / 2]
    small = [b for b in same if b.records < top / 4]
    if len(large) < 3 or len(small) < 3:
        return capacity
    x_large = statistics.median(b.records for b in large) / count
    x_small = statistics.median(b.records for b in small) / count
    y_large = statistics.median(b.busy_s for b in large)
    y_small = statistics.median(b.busy_s for b in small)
    if y_large <= y_small:
        return capacity
    slope = (y_large - y_small) / (x_large - x_small)
    note = f"medians of {len(large)} large and {len(small)} small batches at {count} executor(s)"
    fixed = max(0.0, y_small - slope * x_small)
    return Capacity(fixed, 1 / slope, CapacityMethod.FIT, len(large) + len(small), note)


def _controller_fit(ordered: Sequence[Mapping[str, Any]]) -> Capacity | None:
    """The last capacity the run's controller fitted itself (its record says ``fit``)."""
    for record in reversed(ordered):
        rate, fixed = record.get("executor_rate"), record.get("fixed_cost_s")
        if record.get("capacity_method") == "fit" and rate and fixed is not None:
            note = "fitted by the run's controller (its batches pooled are too noisy)"
            return Capacity(float(fixed), float(rate), CapacityMethod.FIT, 0, note)
    return None


def calibrate(records: Sequence[Mapping[str, Any]]) -> Calibration:
    """Fit fixed cost and per-executor rate on the batches of a decision log (its parsed JSON
    lines, as ``controller.DecisionRecord`` writes them) with the production fit
    (:func:`~streamscale.autoscale.capacity.fit`) on the batches of the executor count that ran
    the most (:func:`_calibration_fit`) — or, when those cannot be fitted, take the last fit the
    run's own controller recorded; measure the control interval and the
    scale-up delay where the log shows them (the controller's measured starts,
    ``executor_start_s``; in a log without them, to the control interval).

    Raises ValueError when a record is not of that shape.
    """
    seen: dict[int, BatchSample] = {}
    try:
        ordered = sorted(records, key=lambda r: float(r["time"]))
        for record in ordered:
            for batch_id, started, busy, count, executors in record.get("batches") or ():
                seen[int(batch_id)] = BatchSample(
                    int(count), float(busy), int(executors), float(started)
                )
        times = [float(r["time"]) for r in ordered]
        pauses = tuple(ScaleCost.from_dict(c) for r in ordered for c in r.get("scale_costs") or ())
        # The controller's own measure (request to the last registration) where the log has
        # it; else to the first step that saw the count, to the control interval.
        delays = [
            float(r["executor_start_s"]) for r in ordered if r.get("executor_start_s") is not None
        ]
        for i, record in enumerate(() if delays else ordered):
            if record.get("outcome") == "applied" and record.get("direction") == "up":
                want = int(record["desired"])
                for later in ordered[i + 1 :]:
                    if int(later.get("running", 0)) >= want:
                        delays.append(float(later["time"]) - times[i])
                        break
    except (KeyError, TypeError, ValueError) as exc:
        raise ConfigError(f"not a decision log record: {exc}") from None
    batches = [seen[k] for k in sorted(seen)]
    capacity = _calibration_fit(batches)
    if not capacity.known:
        capacity = _controller_fit(ordered) or capacity
    gaps = [b - a for a, b in itertools.pairwise(times) if b > a]
    return Calibration(
        capacity=capacity,
        batches=len(batches),
        control_interval_s=statistics.median(gaps) if gaps else None,
        start_delay_s=statistics.median(delays) if delays else None,
        pauses=pauses,
    )


@dataclass(frozen=True)
class Action:
    """A change of the executor count, in seconds from the start of a run or a replay."""

    t: float
    current: int
    desired: int
    reason: str


@dataclass(frozen=True)
class Replay:
    """A real run's input replayed on the simulator calibrated from the same run's log."""

    trace: Trace
    model: ClusterModel
    calibration: Calibration
    real: tuple[Action, ...]
    simulated: SimResult

    @property
    def actions(self) -> tuple[Action, ...]:
        """The simulated run's actions."""
        return tuple(
            Action(float(d.t), d.current, d.desired, d.reason)
            for d in self.simulated.decisions
            if d.desired != d.current
        )

    def matches(self, tolerance_s: float | None = None) -> bool:
        """Same actions in the same order and directions, each within ``tolerance_s`` (one
        control interval by default) of the real one."""
        tolerance = self.model.control_interval_s if tolerance_s is None else tolerance_s
        simulated = self.actions
        if len(simulated) != len(self.real):
            return False
        return all(
            (s.desired > s.current) == (r.desired > r.current) and abs(s.t - r.t) <= tolerance
            for s, r in zip(simulated, self.real, strict=True)
        )


def replay(records: Sequence[Mapping[str, Any]], scenario: Scenario) -> Replay:
    """Calibrate ``scenario``'s model on a real decision log (:func:`calibrate`), replay the
    run's input (:func:`~streamscale.autoscale.traces.from_decision_log`) with the policy the
    scenario configures, and pair the real actions with the simulated ones.

    Times are seconds from the log's first record with metrics. Raises ValueError (a
    ``TraceError`` included) when the log cannot be calibrated or replayed.
    """
    calibration = calibrate(records)
    model = calibration.apply(scenario.model)
    trace = from_decision_log(records, "replay", tail_s=model.control_interval_s)
    ordered = sorted(records, key=lambda r: float(r["time"]))
    start = next(float(r["time"]) for r in ordered if r.get("total_lag") is not None)
    real = tuple(
        Action(
            round(float(r["time"]) - start, 1),
            int(r["running"]) + int(r.get("pending") or 0),
            int(r["desired"]),
            str(r["reason"]),
        )
        for r in ordered
        if r.get("outcome") == "applied" and r.get("direction") in ("up", "down")
    )
    result = simulate(trace, model, replace(scenario, model=model).policy_config())
    return Replay(trace, model, calibration, real, result)


# --- scoring on a generated trace family (issue 23) -------------------------------------

FAMILY_POLICIES = ("rate", "lag", "oracle")
"""What :func:`score_seed` runs on each seed's trace (and the ``others`` it is asked for)."""


@dataclass(frozen=True)
class FamilyScore:
    """The figures of ``rate``, ``lag``, the oracle and any other strategy on one generated
    trace."""

    seed: int
    description: str
    rate: Summary
    lag: Summary
    oracle: Summary
    late_oracle: Summary | None = None
    """The oracle's plan one decision late (:meth:`Plan.delayed`), when asked for."""
    others: tuple[tuple[str, Summary], ...] = ()
    """Other strategies by name (the peers, :data:`.peers.PEER_NAMES`), when asked for."""

    def summary(self, name: str) -> Summary:
        """The figures of ``rate``, ``lag``, ``oracle`` or one of :attr:`others`."""
        if name in FAMILY_POLICIES:
            value: Summary = getattr(self, name)
            return value
        return dict(self.others)[name]

    def ratio(self, name: str) -> float:
        """Executor-seconds of a strategy over the oracle's."""
        value = self.summary(name).executor_seconds
        reference = self.oracle.executor_seconds
        if reference <= 0:
            return 1.0 if value <= 0 else math.inf
        return float(value / reference)

    def violates_beyond_oracle(self, name: str) -> bool:
        """The strategy breaks the SLO on a trace where the oracle does not."""
        return self.oracle.slo_violation_s == 0 and self.summary(name).slo_violation_s > 0


def score_seed(
    seed: int,
    duration_s: int | None = None,
    scenario: Scenario = GENERIC,
    base: policy.PolicyConfig | None = None,
    oracle_summary: Summary | None = None,
    *,
    late_oracle: bool = False,
    others: Sequence[str] = (),
) -> FamilyScore:
    """``rate``, ``lag`` and the oracle on the generated trace of ``seed``
    (:func:`~streamscale.autoscale.family.generate`), in ``scenario`` (the generic cluster by
    default) with the throughput jitter drawn from the same seed. ``oracle_summary``: the
    oracle's figures on that trace and scenario when already known (they do not depend on
    the policies, and the oracle's search takes most of the time). ``late_oracle`` also runs
    the oracle's plan one decision late (its plan is then searched, known figures or not);
    ``others`` names more strategies to run (:func:`resolve`'s names: the peers)."""
    recipe = family.draw(seed, duration_s)
    trace = family.render(recipe)
    model = replace(scenario.model, seed=seed)
    config = scenario.policy_config(base)
    known = {} if oracle_summary is None else {"oracle": oracle_summary}
    late = None
    if late_oracle:
        plan = oracle(trace, model, config.min_executors, config.max_executors)
        known["oracle"] = simulate(trace, model, plan).summary
        late = simulate(trace, model, plan.delayed()).summary
    summaries = {
        name: known.get(name) or simulate(trace, model, resolve(name, config, trace, model)).summary
        for name in (*FAMILY_POLICIES, *others)
    }
    return FamilyScore(
        seed,
        recipe.describe(),
        summaries["rate"],
        summaries["lag"],
        summaries["oracle"],
        late,
        tuple((name, summaries[name]) for name in others),
    )
