"""KEDA's Kafka scaler driving a HorizontalPodAutoscaler (autoscaling/v2): the seeds' design.

Written from ``kedacore/keda`` ``pkg/scalers/kafka_scaler.go`` (v2 line: ``lagThreshold``
default 10, the total lag of the group over every partition of its topics, capped at
``partitions × lagThreshold`` unless ``allowIdleConsumers``, exposed as an ``AverageValue``
target of ``lagThreshold``) and ``kubernetes/kubernetes`` ``pkg/controller/podautoscaler``
(``replica_calculator.go``: ``GetExternalPerPodMetricReplicas``, desired = ceil(metric /
target), none within the 0.1 tolerance; ``horizontal.go``: the 15 s sync period,
``normalizeDesiredReplicasWithBehaviors`` with the default behavior — scale-up without a
stabilization window by at most max(4 pods, 100 %) per 15 s, scale-down to the highest
recommendation of the last 300 s). Read, not copied.

One pod is one executor. The lag is read from committed offsets (the query's consumer group,
as ``streamscale`` commits it after each batch): the observation's records lag. The HPA
syncs every 15 s; the simulator asks every control interval, so the peer acts at the first
observation of each new sync period and holds in between.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from streamscale.autoscale import policy
from streamscale.autoscale.peers import common
from streamscale.autoscale.policy import Reason


@dataclass(frozen=True)
class HpaConfig:
    """The ScaledObject's Kafka trigger and the HPA's defaults, and the cluster's bounds."""

    base: policy.PolicyConfig
    lag_threshold: float = 10.0
    allow_idle_consumers: bool = False
    sync_s: float = 15.0
    tolerance: float = 0.1
    up_pods: int = 4
    up_percent: float = 100.0
    down_window_s: float = 300.0


@dataclass(frozen=True)
class HpaState:
    """The recommendations of the scale-down window and the last sync."""

    recommendations: tuple[tuple[float, int], ...] = ()
    last_sync_s: float | None = None


def defaults(base: policy.PolicyConfig) -> HpaConfig:
    """KEDA's and the HPA's defaults (``lagThreshold`` 10)."""
    return HpaConfig(base)


def tuned(base: policy.PolicyConfig, executor_rate: float) -> HpaConfig:
    """``lagThreshold`` at 30 s of one executor's work (the objective's time lag, per pod)."""
    return HpaConfig(base, lag_threshold=max(1.0, 30.0 * executor_rate))


def kafka_metric(config: HpaConfig, total_lag: int, partitions: int) -> int:
    """The scaler's metric: the total lag, capped so that the HPA asks for no more pods than
    partitions (integer division, as the scaler does)."""
    threshold = max(1, int(config.lag_threshold))
    if not config.allow_idle_consumers and total_lag // threshold > partitions:
        return partitions * threshold
    return total_lag


def recommendation(config: HpaConfig, metric: float, current: int) -> int:
    """The replica calculator: ceil(metric / target), or ``current`` within the tolerance."""
    if current > 0:
        usage = metric / (config.lag_threshold * current)
        if abs(usage - 1) <= config.tolerance:
            return current
    return math.ceil(metric / config.lag_threshold - 1e-9)


def decide(
    config: HpaConfig, state: HpaState, obs: policy.Observation
) -> tuple[policy.Decision, HpaState]:
    """One HPA sync (held between syncs)."""
    now = obs.now_s
    bounded = common.out_of_bounds(config.base, obs)
    if bounded is not None:
        return bounded, state
    last = state.last_sync_s
    if last is not None and math.floor(now / config.sync_s) == math.floor(last / config.sync_s):
        return common.hold(obs, Reason.HOLD_STABILIZING), state
    state = replace(state, last_sync_s=now)
    base = config.base
    current = common.current(obs)
    if common.stale(obs):
        return common.hold(obs, Reason.HOLD_MISSING_METRICS), state
    metric = kafka_metric(config, obs.total_lag, obs.partitions)
    raw = recommendation(config, metric, current)
    window = config.down_window_s
    kept = (*(r for r in state.recommendations if r[0] > now - window), (now, raw))
    state = replace(state, recommendations=kept)
    desired = raw
    if raw < current:  # scale-down stabilization: the highest recommendation of the window
        desired = min(current, max(n for _, n in kept))
    up_limit = max(current + config.up_pods, math.ceil(current * (1 + config.up_percent / 100)))
    desired = min(desired, up_limit)
    hi = base.max_executors  # KEDA's cap at the partitions is in the metric
    desired = max(base.min_executors, min(hi, desired))
    target = metric / config.lag_threshold
    if desired > current:
        return common.decision(obs, desired, Reason.SCALE_UP_BACKLOG, target), state
    if desired < current:
        return common.decision(obs, desired, Reason.SCALE_DOWN_IDLE, target), state
    if raw != current:
        reason = Reason.HOLD_STABILIZING if raw < current else Reason.BOUNDED_MAX
        return common.hold(obs, reason, target), state
    return common.hold(obs, Reason.HOLD_WITHIN_TOLERANCE, target), state
