"""DS2 (Kalavri et al., "Three steps is all you need: fast, accurate, automatic scaling
decisions for distributed streaming dataflows", OSDI 2018), on Spark executors.

Written from the paper (sections 3 and 4: true processing and output rates from useful
time; the optimal parallelism of an operator = ceil(target input rate / true processing
rate of one instance); the policy interval and the warm-up after a change; no backlog term,
no utilization target, no bounds beyond the instances available). Read, not copied.

The query is one DS2 operator fed by the Kafka source: its target rate is the input rate the
source observed over the last policy interval (10 s), its true rate per instance the records
an executor processed per second of useful time over the batches of that interval: the
executors' task time, each batch's time less its fixed cost (:func:`.common.task_seconds`).
After a change, DS2 lets ``warmup_intervals`` (2) intervals pass once the new instances run
before it measures again.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from streamscale.autoscale import policy
from streamscale.autoscale.peers import common
from streamscale.autoscale.policy import Reason


@dataclass(frozen=True)
class DS2Config:
    """DS2's policy interval and warm-up, and the cluster's bounds."""

    base: policy.PolicyConfig
    batch_fixed_cost_s: float = 0.0
    """Seconds of a batch that are no task's (Spark's task metrics leave them out)."""
    interval_s: float = 10.0
    warmup_intervals: int = 2


@dataclass(frozen=True)
class DS2State:
    """When the running instances last changed, and the last policy interval."""

    stable_since_s: float = float("-inf")
    running: int | None = None
    last_tick_s: float | None = None


def defaults(base: policy.PolicyConfig, batch_fixed_cost_s: float = 0.0) -> DS2Config:
    """DS2's published settings (10 s policy interval, 2 warm-up intervals)."""
    return DS2Config(base, batch_fixed_cost_s)


def true_rate_per_instance(records: float, useful_s: float, instances: int) -> float | None:
    """Records one of ``instances`` processes per second of useful time (None without
    useful time)."""
    if useful_s <= 0 or instances < 1:
        return None
    return records / (useful_s * instances)


def decide(
    config: DS2Config, state: DS2State, obs: policy.Observation
) -> tuple[policy.Decision, DS2State]:
    """One DS2 policy step."""
    now = obs.now_s
    since = state.last_tick_s if state.last_tick_s is not None else now - config.interval_s
    if state.running is not None and state.running != obs.executors:
        state = replace(state, stable_since_s=now)
    state = replace(state, running=obs.executors)
    bounded = common.out_of_bounds(config.base, obs)
    if bounded is not None:
        return bounded, state
    if state.last_tick_s is not None and now - state.last_tick_s < config.interval_s - 1e-9:
        return common.hold(obs, Reason.HOLD_STEADY), state
    state = replace(state, last_tick_s=now)
    current = common.current(obs)
    if common.stale(obs):
        return common.hold(obs, Reason.HOLD_MISSING_METRICS), state
    if obs.pending_executors > 0:
        return common.hold(obs, Reason.HOLD_SCALING_IN_PROGRESS), state
    if now - state.stable_since_s < config.warmup_intervals * config.interval_s:
        return common.hold(obs, Reason.HOLD_WARMING_UP), state
    batches = common.batches_since(obs, since)
    working = max((b.executors or obs.executors for b in batches), default=obs.executors)
    per_instance = true_rate_per_instance(
        sum(b.records for b in batches),
        common.task_seconds(config.batch_fixed_cost_s, batches),
        working,
    )
    observed = obs.input_rate if obs.recent_input_rate is None else obs.recent_input_rate
    if per_instance is None:
        if observed <= 0 and obs.total_lag <= 0:
            desired = common.clamp(config.base, obs, 0)
            reason = Reason.SCALE_DOWN_IDLE if desired < current else Reason.HOLD_STEADY
            return common.decision(obs, desired, reason, 0.0), state
        return common.hold(obs, Reason.HOLD_UNMEASURED_RATE), state
    target = observed / per_instance
    desired = common.clamp(config.base, obs, target)
    if desired > current:
        return common.decision(obs, desired, Reason.SCALE_UP_RATE, target), state
    if desired < current:
        return common.decision(obs, desired, Reason.SCALE_DOWN_IDLE, target), state
    return common.hold(obs, Reason.HOLD_STEADY, target), state
