"""The Flink Kubernetes operator's autoscaler (FLIP-271, after DS2), on Spark executors.

Written from ``apache/flink-kubernetes-operator``, module ``flink-autoscaler`` (main branch,
read 2026-11-27): ``config/AutoScalerOptions.java`` for the defaults,
``ScalingMetricEvaluator.java`` (true processing rate, scale-up and scale-down rate
thresholds, backlog), ``JobVertexScaler.java`` (scale factor, its bounds, partition
alignment, the delayed scale-down of ``scale-down.interval``) and
``utils/AutoScalerUtils.getTargetProcessingCapacity``. Read, not copied.

One Flink vertex, the query, whose parallelism is the executor count (one core each):

- every metric is averaged over ``metrics.window`` (15 min); metrics are not collected during
  ``stabilization.interval`` (5 min) after a rescale, and nothing is decided until the
  window is full again;
- true processing rate = records processed / busy time (Flink's ``busyTimeMsPerSecond``; on
  micro-batches, the executors' task time: each batch's time less its fixed cost,
  :func:`.common.task_seconds`);
- target capacity = lag / catch-up + input × restart time / catch-up + input / target
  utilization (0.7); catch-up ``catch-up.duration`` (30 min), restart ``restart.time``
  (5 min; tracked restarts are off by default);
- no change while the true rate lies between the capacity needed at utilization 1.0 (0.7 +
  the 0.3 boundary, restart not counted) and at 0.4 (restart counted): the utilization band;
- scale factor = target capacity / true rate, at most ``scale-up.max-factor`` (100 000) up
  and ``scale-down.max-factor`` (0.6) down; parallelism = ceil(current × factor), aligned up
  to a divisor of the source's partitions (a Kafka source's partitions spread evenly);
- a scale-up happens at once; a scale-down waits ``scale-down.interval`` (1 h) from its first
  recommendation and then goes to the highest recommendation of that interval
  (``DelayedScaleDown``; releases before it had ``scale-up.grace-period``, 1 h, no scale-down
  within an hour of a scale-up, to the same effect here); none while the backlog exceeds
  ``backlog-processing.lag-threshold`` (5 min of input).

At the start of a trace the job has been running for a while: its window counts as full (it
averages what it has seen so far).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from streamscale.autoscale import policy
from streamscale.autoscale.peers import common
from streamscale.autoscale.policy import Reason


@dataclass(frozen=True)
class FlinkConfig:
    """``job.autoscaler.*`` options (their defaults) and the cluster's bounds."""

    base: policy.PolicyConfig
    batch_fixed_cost_s: float = 0.0
    """Seconds of a batch that are no task's (Spark's task metrics leave them out)."""
    metrics_window_s: float = 900.0
    stabilization_s: float = 300.0
    target_utilization: float = 0.7
    utilization_boundary: float = 0.3
    catch_up_s: float = 1800.0
    restart_s: float = 300.0
    scale_down_interval_s: float = 3600.0
    scale_down_max_factor: float = 0.6
    scale_up_max_factor: float = 100_000.0
    backlog_threshold_s: float = 300.0


@dataclass(frozen=True)
class FlinkState:
    """What the autoscaler keeps between evaluations."""

    samples: tuple[tuple[float, float, float | None], ...] = ()
    """``(time, input rate, true processing rate)`` collected within the window."""
    collect_from_s: float = -math.inf
    """Metrics are collected from then (after the last rescale's stabilization)."""
    last_tick_s: float | None = None
    last_change_s: float | None = None
    delayed: tuple[tuple[float, int], ...] = ()
    """Scale-down recommendations since ``first_trigger_s``."""
    first_trigger_s: float | None = None


def defaults(base: policy.PolicyConfig, batch_fixed_cost_s: float = 0.0) -> FlinkConfig:
    """The operator's defaults."""
    return FlinkConfig(base, batch_fixed_cost_s)


def tuned(base: policy.PolicyConfig, batch_fixed_cost_s: float = 0.0) -> FlinkConfig:
    """Tuned once to the 30 s time-lag objective: a backlog is caught up within 30 s, the
    metrics window and the stabilization interval are 30 s, a scale-down waits the project's
    stabilization window, the backlog threshold is the objective, and the restart time is the
    one measured (executor start, rescale pause, state reload)."""
    restart = base.scale_up_delay_s + base.restart_pause_s + base.state_reload_s
    return FlinkConfig(
        base,
        batch_fixed_cost_s,
        metrics_window_s=30.0,
        stabilization_s=30.0,
        catch_up_s=30.0,
        restart_s=restart,
        scale_down_interval_s=base.stabilization_window_s,
        backlog_threshold_s=30.0,
    )


def target_capacity(
    config: FlinkConfig, input_rate: float, lag: float, utilization: float, with_restart: bool
) -> float:
    """``getTargetProcessingCapacity``: records/s the vertex needs at ``utilization``
    (infinite at utilization 0)."""
    catch_up = lag / config.catch_up_s if config.catch_up_s > 0 else 0.0
    restart = input_rate * config.restart_s / config.catch_up_s if with_restart else 0.0
    if utilization <= 0:
        return math.inf
    return catch_up + restart + input_rate / utilization


def aligned(parallelism: int, partitions: int, upper: int) -> int:
    """The smallest divisor of ``partitions`` from ``parallelism`` up to ``upper`` (a source's
    partitions spread evenly), else ``parallelism`` itself, capped at ``upper``."""
    for p in range(max(1, parallelism), upper + 1):
        if partitions % p == 0:
            return p
    return min(parallelism, upper)


def decide(
    config: FlinkConfig, state: FlinkState, obs: policy.Observation
) -> tuple[policy.Decision, FlinkState]:
    """One evaluation of the autoscaler."""
    base = config.base
    now = obs.now_s
    current = common.current(obs)
    since = state.last_tick_s if state.last_tick_s is not None else now - base.decision_interval_s
    state = replace(state, last_tick_s=now)
    bounded = common.out_of_bounds(base, obs)
    if bounded is not None:
        return bounded, _changed(config, state, now)
    if common.stale(obs):
        return common.hold(obs, Reason.HOLD_MISSING_METRICS), state
    if obs.pending_executors > 0:
        return common.hold(obs, Reason.HOLD_SCALING_IN_PROGRESS), state
    if now < state.collect_from_s:
        return common.hold(obs, Reason.HOLD_WARMING_UP), state
    batches = common.batches_since(obs, since)
    busy = common.task_seconds(config.batch_fixed_cost_s, batches)
    true_rate = sum(b.records for b in batches) / busy if busy > 0 else None
    window = config.metrics_window_s
    samples = (*(s for s in state.samples if s[0] > now - window), (now, obs.input_rate, true_rate))
    state = replace(state, samples=samples)
    if now - state.collect_from_s < window:
        return common.hold(obs, Reason.HOLD_WARMING_UP), state
    measured = [s[2] for s in samples if s[2] is not None]
    if not measured:
        return common.hold(obs, Reason.HOLD_UNMEASURED_RATE), state
    rate = sum(measured) / len(measured)
    target_rate = sum(s[1] for s in samples) / len(samples)
    lag = float(obs.total_lag)
    up = target_capacity(
        config,
        target_rate,
        lag,
        min(1.0, config.target_utilization + config.utilization_boundary),
        False,
    )
    down = target_capacity(
        config,
        target_rate,
        lag,
        max(0.0, config.target_utilization - config.utilization_boundary),
        True,
    )
    if target_rate > 0 and lag / target_rate > config.backlog_threshold_s:
        down = math.inf  # no scale-down while processing a backlog
    if up <= rate <= down:
        state = replace(state, delayed=(), first_trigger_s=None)
        return common.hold(obs, Reason.HOLD_WITHIN_TOLERANCE), state
    wanted = target_capacity(config, target_rate, lag, config.target_utilization, True)
    factor = wanted / rate
    factor = max(1 - config.scale_down_max_factor, min(1 + config.scale_up_max_factor, factor))
    upper = policy.upper_bound(base, obs)
    raw = math.ceil(current * factor - 1e-9)
    new = common.clamp(base, obs, aligned(raw, obs.partitions, upper))
    target = current * factor
    if new > current:
        reason = Reason.SCALE_UP_BACKLOG if policy.has_backlog(base, obs) else Reason.SCALE_UP_RATE
        return common.decision(obs, new, reason, target), _changed(config, state, now)
    if new == current:
        state = replace(state, delayed=(), first_trigger_s=None)
        return common.hold(obs, Reason.HOLD_STEADY, target), state
    first = now if state.first_trigger_s is None else state.first_trigger_s
    interval = config.scale_down_interval_s
    delayed = (*(d for d in state.delayed if d[0] > now - interval), (now, new))
    state = replace(state, delayed=delayed, first_trigger_s=first)
    if now - first < interval:
        return common.hold(obs, Reason.HOLD_STABILIZING, target), state
    desired = max(n for _, n in delayed)
    if desired >= current:
        return common.hold(obs, Reason.HOLD_STEADY, target), state
    return common.decision(obs, desired, Reason.SCALE_DOWN_IDLE, target), _changed(
        config, state, now
    )


def _changed(config: FlinkConfig, state: FlinkState, now: float) -> FlinkState:
    """After a rescale: nothing collected until the stabilization interval has passed."""
    return replace(
        state,
        samples=(),
        collect_from_s=now + config.stabilization_s,
        last_change_s=now,
        delayed=(),
        first_trigger_s=None,
    )
