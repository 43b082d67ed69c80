"""A discrete-time model of a streaming cluster, to replay input-rate traces against policies.

Pure and deterministic: the same trace, model and strategy give the same result (the only
randomness, a per-second jitter of executor throughput, comes from ``random.Random(seed)`` and
is drawn once per run, identically for every strategy).

The model, in 1-second steps:

- each running executor processes ``executor_rate`` records/s (× the second's jitter), but only
  ``ceil(partitions × splits / cores)`` executors get tasks: the rest idle;
- a requested executor runs ``start_delay_s`` after the request; a killed one stops processing
  at once and is released (still billed) ``stop_delay_s`` later;
- whenever the set of running executors changes, processing pauses ``rescale_pause_s``
  (state-store partitions reload on their new executors);
- every ``control_interval_s`` the strategy sees an :class:`~streamscale.autoscale.policy.
  Observation` built from the last interval (average input and processed rates, one
  micro-batch sample per second, records lag split evenly over partitions, time lag) and
  answers with an executor count — the production policy code, :func:`policy.decide`;
- records lag is FIFO: time lag is the age of the oldest unprocessed record.
- a policy starts at the count it settles on for the trace's first rate with no lag (so that
  the first decision answers the trace, not the start-up); fixed counts and plans at theirs.

Figures: ``drain_time_s`` (seconds during which time lag exceeds ``caught_up_s``),
``max_lag``, ``max_time_lag_s``, ``executor_seconds`` (running, starting and stopping
executors), ``actions`` (changes of the requested count) and ``reversals`` (consecutive actions
of opposite direction less than ``reversal_window_s`` apart).

The oracle (:func:`oracle`) is the cheapest plan found with hindsight that keeps the time lag
under ``target_time_lag_s`` (or, where even ``max_executors`` cannot, no worse than running
``max_executors`` throughout) and ends caught up. It picks one count per control interval,
subject to the same delays, pauses and billing as the policies:

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
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

from streamscale.autoscale import policy
from streamscale.autoscale.traces import Trace

_EPS = 1e-6


@dataclass(frozen=True)
class ClusterModel:
    """The simulated cluster and the measurement conventions (defaults: see docs)."""

    executor_rate: float = 1000.0
    """Records/s one executor processes when busy."""
    partitions: int = 8
    splits_per_partition: int = 1
    executor_cores: int = 1
    start_delay_s: int = 13
    """Executor request → first task (standalone measured: ~3 s + ~10 s first Python task)."""
    stop_delay_s: int = 5
    """Kill → resources released (billed meanwhile)."""
    rescale_pause_s: int = 5
    """Processing pause after the running set changes (state reload)."""
    control_interval_s: int = 10
    metrics_age_s: float = 1.0
    rate_jitter: float = 0.05
    """Relative spread (uniform ±) of throughput from second to second."""
    seed: int = 0
    metrics_outages: tuple[tuple[int, int], ...] = ()
    """[start, end) seconds during which the strategy gets no metrics."""
    caught_up_s: float = 5.0
    """Time lag above this counts towards the drain time."""
    target_time_lag_s: float = 30.0
    """The oracle's constraint (the latency objective)."""
    reversal_window_s: float = 60.0

    def __post_init__(self) -> None:
        if self.executor_rate <= 0 or self.partitions < 1 or self.splits_per_partition < 1:
            raise ValueError("executor_rate > 0, partitions >= 1, splits >= 1 required")
        if self.executor_cores < 1 or self.control_interval_s < 1:
            raise ValueError("executor_cores and control_interval_s must be >= 1")
        if min(self.start_delay_s, self.stop_delay_s, self.rescale_pause_s) < 0:
            raise ValueError("delays must be >= 0")
        if not 0 <= self.rate_jitter < 1:
            raise ValueError("rate_jitter must be in [0, 1)")

    @property
    def usable_executors(self) -> int:
        """Executors that get tasks: more than that idle."""
        return math.ceil(self.partitions * self.splits_per_partition / self.executor_cores)


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


Strategy = policy.PolicyConfig | Fixed | Plan


def strategy_name(strategy: Strategy) -> str:
    """``rate``, ``lag``, ``fixed:N`` or the plan's name."""
    if isinstance(strategy, policy.PolicyConfig):
        return strategy.kind.value
    return strategy.name


@dataclass(frozen=True)
class SimDecision:
    """One control step: what ran, what was asked, why."""

    t: int
    current: int
    desired: int
    reason: str


@dataclass(frozen=True)
class Summary:
    """The figures reported per strategy."""

    drain_time_s: int
    max_lag: float
    max_time_lag_s: float
    executor_seconds: float
    actions: int
    reversals: int

    def as_dict(self) -> dict[str, float | int]:
        return {
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
    summary: Summary = field(compare=False)


class _Cluster:
    """Mutable simulation state; ``copy()`` lets the oracle explore alternatives."""

    __slots__ = (
        "arrived",
        "batches",
        "billed",
        "cum",
        "done",
        "inputs",
        "jitter",
        "lag",
        "model",
        "outputs",
        "pause_until",
        "pending",
        "ptr",
        "rates",
        "running",
        "stopping",
        "t",
        "time_lag",
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
        self.pause_until = 0
        self.billed = 0.0
        self.inputs: list[float] = []
        self.outputs: list[float] = []
        self.batches: list[tuple[int, policy.BatchSample]] = []

    def copy(self) -> _Cluster:
        other = _Cluster.__new__(_Cluster)
        for name in _Cluster.__slots__:
            setattr(other, name, getattr(self, name))
        other.pending = list(self.pending)
        other.stopping = list(self.stopping)
        # Histories are only read over the last interval: keep them short in copies.
        keep = self.model.control_interval_s
        other.inputs = self.inputs[-keep:]
        other.outputs = self.outputs[-keep:]
        other.batches = self.batches[-keep:]
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
                self.pause_until = max(self.pause_until, t + self.model.rescale_pause_s)

    def observe(self, now: int) -> policy.Observation:
        model = self.model
        window = model.control_interval_s
        inputs = self.inputs[-window:]
        outputs = self.outputs[-window:]
        batches = tuple(b for when, b in self.batches if when >= now - window)
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
            processed_rate=sum(outputs) / len(outputs) if outputs else 0.0,
            batches=batches,
            metrics_age_s=None if outage or not inputs else model.metrics_age_s,
            time_lag_s=self.time_lag,
        )

    def step(self) -> None:
        """Simulate the current second and advance."""
        t = self.t
        model = self.model
        if self.pending and self.pending[0][0] <= t:
            joined = [p for p in self.pending if p[0] <= t]
            self.pending = [p for p in self.pending if p[0] > t]
            self.running += sum(n for _, n in joined)
            self.pause_until = max(self.pause_until, t + model.rescale_pause_s)
        if self.stopping and self.stopping[0][0] <= t:
            self.stopping = [s for s in self.stopping if s[0] > t]
        self.billed += self.running + sum(n for _, n in self.pending)
        self.billed += sum(n for _, n in self.stopping)
        working = min(self.running, model.usable_executors)
        capacity = 0.0
        if t >= self.pause_until and working > 0:
            capacity = working * model.executor_rate * self.jitter[t]
        arriving = self.rates[t]
        processed = min(self.lag + arriving, capacity)
        self.lag = max(0.0, self.lag + arriving - processed)
        self.arrived += arriving
        self.done += processed
        self.inputs.append(arriving)
        self.outputs.append(processed)
        if processed > 0:
            sample = policy.BatchSample(round(processed), processed / capacity, working)
            self.batches.append((t, sample))
        # FIFO time lag at the end of second t: age of the oldest unprocessed record.
        if self.lag <= _EPS:
            self.time_lag = 0.0
        else:
            cum = self.cum
            ptr = self.ptr
            while ptr + 1 < len(cum) and cum[ptr + 1] <= self.done:
                ptr += 1
            self.ptr = ptr
            rate = self.rates[ptr] if ptr < len(self.rates) else 0.0
            oldest = ptr + ((self.done - cum[ptr]) / rate if rate > 0 else 0.0)
            self.time_lag = t + 1 - oldest
        self.t = t + 1


def _jitter(model: ClusterModel, seconds: int) -> tuple[float, ...]:
    rng = random.Random(model.seed)
    spread = model.rate_jitter
    return tuple(1.0 + rng.uniform(-spread, spread) for _ in range(seconds))


Decider = Callable[[policy.Observation], tuple[int, str]]


def _decider(strategy: Strategy, model: ClusterModel, first_rate: float) -> tuple[int, Decider]:
    """Initial executor count and a stateful decision function for a strategy."""
    if isinstance(strategy, Fixed):
        n = strategy.executors
        return n, lambda obs: (n, "fixed")
    if isinstance(strategy, Plan):
        plan = strategy.executors
        interval = model.control_interval_s

        def follow(obs: policy.Observation) -> tuple[int, str]:
            k = min(int(obs.now_s) // interval, len(plan) - 1)
            return plan[k], "plan"

        return plan[0], follow
    config = strategy
    state = policy.PolicyState()

    def decide(obs: policy.Observation) -> tuple[int, str]:
        nonlocal state
        decision, state = policy.decide(config, state, obs)
        return decision.desired, decision.reason.value

    return _warm_start(config, model, first_rate), decide


def _warm_start(config: policy.PolicyConfig, model: ClusterModel, rate: float) -> int:
    """Steady count the policy picks for ``rate`` with no lag (the state before the trace)."""
    current = max(1, config.min_executors)
    for _ in range(8):
        working = min(current, model.usable_executors)
        busy = min(1.0, rate / (working * model.executor_rate)) if rate > 0 else 0.0
        samples = (policy.BatchSample(round(rate), busy, working),) if rate > 0 else ()
        obs = policy.Observation(
            now_s=0.0,
            executors=current,
            partitions=model.partitions,
            splits_per_partition=model.splits_per_partition,
            partition_lag=(0,) * model.partitions,
            input_rate=rate,
            processed_rate=rate,
            batches=samples * model.control_interval_s,
            metrics_age_s=0.0,
        )
        decision, _ = policy.decide(config, policy.PolicyState(), obs)
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
            obs = cluster.observe(t)
            current = cluster.requested
            desired, reason = decide(obs)
            decisions.append(SimDecision(t, current, desired, reason))
            cluster.request(desired)
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
    return cluster.lag <= _EPS and not cluster.pending and cluster.t >= cluster.pause_until


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
    """A strategy from its CLI name: ``rate``, ``lag``, ``fixed:N`` or ``oracle``.

    ``rate`` and ``lag`` use ``config`` with its kind replaced; ``oracle`` is computed for
    ``trace`` within the config's bounds. Raises ValueError with a one-line message.
    """
    if name in ("rate", "lag"):
        return replace(config, kind=policy.PolicyKind(name))
    if name == "oracle":
        return oracle(trace, model, config.min_executors, config.max_executors)
    if name.startswith("fixed:"):
        try:
            n = int(name.removeprefix("fixed:"))
        except ValueError:
            n = -1
        if n < 1:
            raise ValueError(f"{name}: fixed:N needs a whole number of executors >= 1")
        return Fixed(n)
    raise ValueError(f"{name}: unknown policy (rate, lag, fixed:N, oracle)")


def comparison_names(config: policy.PolicyConfig) -> tuple[str, ...]:
    """Every strategy of a side-by-side comparison, oracle last."""
    low = max(1, config.min_executors)
    return ("rate", "lag", f"fixed:{low}", f"fixed:{config.max_executors}", "oracle")
