"""Spark's own executor scaling: dynamic allocation, and the DStreams streaming rule.

Dynamic allocation (``spark-dynamic``), written from ``apache/spark``
``core/src/main/scala/org/apache/spark/ExecutorAllocationManager.scala`` (branch-4.0) and the
configuration docs (``spark.dynamicAllocation.*``): executors are requested once tasks have
been pending for ``schedulerBacklogTimeout`` (1 s), one at first, then twice as many each
``sustainedSchedulerBacklogTimeout`` (1 s) the backlog lasts (1, 2, 4, ...), up to the
executors the running and pending tasks need (tasks × ``executorAllocationRatio`` (1) /
task slots per executor); an executor that has run no task for ``executorIdleTimeout``
(60 s) is removed. It sees tasks, not Kafka: a micro-batch's tasks wait for a slot while
the batch has more tasks than slots, and every executor that gets a task is busy again at
the next trigger. From the observation: a batch of ``tasks`` tasks on ``n`` one-core
executors runs ``ceil(tasks / n)`` waves, and its tasks are pending for all but the last
wave's share of its time; an executor idles when no batch ran for the timeout (an input
outage) or when the batches have fewer tasks than executors. (With
``shuffleTracking.enabled``, Spark 3+'s default without an external shuffle service, an
executor holding shuffle files is not removed at all: this model is kinder than that.)

The DStreams rule (``spark-streaming``), written from ``streaming/src/main/scala/org/apache/
spark/streaming/scheduler/ExecutorAllocationManager.scala`` (branch-4.0): every
``spark.streaming.dynamicAllocation.scalingInterval`` (60 s), the average batch processing
time over that interval divided by the batch interval (here the trigger interval): at or
above ``scalingUpRatio`` (0.9), request ``max(round(ratio), 1)`` executors more; at or
below ``scalingDownRatio`` (0.3), kill one. Read, not copied.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from streamscale.autoscale import policy
from streamscale.autoscale.peers import common
from streamscale.autoscale.policy import Reason


@dataclass(frozen=True)
class DynamicConfig:
    """``spark.dynamicAllocation.*`` defaults, and the cluster's bounds."""

    base: policy.PolicyConfig
    backlog_timeout_s: float = 1.0
    sustained_backlog_timeout_s: float = 1.0
    idle_timeout_s: float = 60.0
    allocation_ratio: float = 1.0


@dataclass(frozen=True)
class DynamicState:
    """The last observation and the start of the last batch seen."""

    last_tick_s: float | None = None
    last_batch_s: float | None = None


def defaults(base: policy.PolicyConfig) -> DynamicConfig:
    """Spark's defaults."""
    return DynamicConfig(base)


def pending_seconds(busy_s: float, tasks: int, slots: int) -> float:
    """How long some of a batch's ``tasks`` wait for one of ``slots`` task slots: all but
    the last of its ``ceil(tasks / slots)`` waves."""
    if slots <= 0 or tasks <= slots:
        return 0.0
    waves = math.ceil(tasks / slots)
    return busy_s * (waves - 1) / waves


def executors_added(config: DynamicConfig, pending_s: float) -> int:
    """Executors requested during a backlog of pending tasks lasting ``pending_s``: 1 after
    the backlog timeout, then 2, 4, ... each sustained timeout (2^rounds - 1 in all)."""
    if pending_s < config.backlog_timeout_s:
        return 0
    sustained = pending_s - config.backlog_timeout_s
    rounds = 1 + math.floor(sustained / config.sustained_backlog_timeout_s)
    return int(2 ** min(rounds, 30)) - 1


def decide(
    config: DynamicConfig, state: DynamicState, obs: policy.Observation
) -> tuple[policy.Decision, DynamicState]:
    """Dynamic allocation over one control interval (it sees the scheduler, not metrics:
    a metrics outage does not stop it)."""
    base = config.base
    now = obs.now_s
    since = state.last_tick_s if state.last_tick_s is not None else now - base.decision_interval_s
    batches = common.batches_since(obs, since)
    starts = [b.started_s for b in batches if b.started_s is not None]
    last_batch = max(starts) if starts else state.last_batch_s
    if last_batch is None:
        last_batch = now  # running before the trace: busy until now
    state = replace(state, last_tick_s=now, last_batch_s=last_batch)
    current = common.current(obs)
    cores = base.executor_cores
    tasks = obs.tasks
    needed = math.ceil(tasks * config.allocation_ratio / cores)
    target = current
    for batch in batches:
        slots = (batch.executors or obs.executors) * cores
        added = executors_added(config, pending_seconds(batch.busy_s, tasks, slots))
        if added:
            target = max(target, min(needed, target + added))
    if now - last_batch >= config.idle_timeout_s:
        target = 0  # every executor idle for the timeout
    elif obs.executors > needed and target <= current:
        target = min(target, needed)  # more executors than tasks: the extra ones idle
    desired = common.clamp(base, obs, target)
    if desired > current:
        return common.decision(obs, desired, Reason.SCALE_UP_BACKLOG, float(target)), state
    if desired < current:
        return common.decision(obs, desired, Reason.SCALE_DOWN_IDLE, float(target)), state
    return common.hold(obs, Reason.HOLD_STEADY, float(target)), state


@dataclass(frozen=True)
class StreamingConfig:
    """``spark.streaming.dynamicAllocation.*`` defaults, and the cluster's bounds."""

    base: policy.PolicyConfig
    scaling_interval_s: float = 60.0
    scaling_up_ratio: float = 0.9
    scaling_down_ratio: float = 0.3


@dataclass(frozen=True)
class StreamingState:
    """When the rule last ran."""

    last_run_s: float | None = None


def streaming_defaults(base: policy.PolicyConfig) -> StreamingConfig:
    """The DStreams rule's defaults."""
    return StreamingConfig(base)


def decide_streaming(
    config: StreamingConfig, state: StreamingState, obs: policy.Observation
) -> tuple[policy.Decision, StreamingState]:
    """The DStreams rule, run once per scaling interval."""
    now = obs.now_s
    base = config.base
    bounded = common.out_of_bounds(base, obs)
    if bounded is not None:
        return bounded, state
    if state.last_run_s is None:
        state = replace(state, last_run_s=now)
        return common.hold(obs, Reason.HOLD_STABILIZING), state
    if now - state.last_run_s < config.scaling_interval_s - 1e-9:
        return common.hold(obs, Reason.HOLD_STABILIZING), state
    batches = common.batches_since(obs, now - config.scaling_interval_s)
    state = replace(state, last_run_s=now)
    current = common.current(obs)
    if not batches:
        return common.hold(obs, Reason.HOLD_UNMEASURED_RATE), state
    interval = base.trigger_interval_s if base.trigger_interval_s > 0 else 1.0
    ratio = sum(b.busy_s for b in batches) / len(batches) / interval
    if ratio >= config.scaling_up_ratio:
        desired = common.clamp(base, obs, current + max(round(ratio), 1))
        reason = Reason.SCALE_UP_RATE
    elif ratio <= config.scaling_down_ratio:
        desired = common.clamp(base, obs, current - 1)
        reason = Reason.SCALE_DOWN_IDLE
    else:
        return common.hold(obs, Reason.HOLD_WITHIN_TOLERANCE, ratio), state
    if desired == current:
        bound = Reason.BOUNDED_MAX if reason is Reason.SCALE_UP_RATE else Reason.BOUNDED_MIN
        return common.hold(obs, bound, ratio), state
    return common.decision(obs, desired, reason, ratio), state
