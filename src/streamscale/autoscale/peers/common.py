"""What every peer shares: its bounds, its view of the recent micro-batches, its decision."""

from __future__ import annotations

import math
from collections.abc import Sequence

from streamscale.autoscale import policy
from streamscale.autoscale.capacity import BatchSample


def clamp(base: policy.PolicyConfig, obs: policy.Observation, count: float) -> int:
    """``count`` rounded up and brought within ``[min_executors, upper_bound]``: the same
    bounds as ``rate``'s (``max_executors`` capped by the tasks a batch can run at once)."""
    whole = math.ceil(count - 1e-9) if math.isfinite(count) else base.max_executors
    return max(base.min_executors, min(policy.upper_bound(base, obs), whole))


def current(obs: policy.Observation) -> int:
    """The count asked for so far: running and requested."""
    return obs.executors + obs.pending_executors


def decision(
    obs: policy.Observation, desired: int, reason: policy.Reason, target: float | None = None
) -> policy.Decision:
    """A decision from the running and requested count to ``desired``."""
    return policy.Decision(desired, reason, current(obs), target)


def hold(
    obs: policy.Observation, reason: policy.Reason, target: float | None = None
) -> policy.Decision:
    """Keep the count asked for so far."""
    return decision(obs, current(obs), reason, target)


def batches_since(obs: policy.Observation, since_s: float) -> list[BatchSample]:
    """The observation's batches that ended after ``since_s`` (all when their start is
    unknown): what completed since then, however long ago it started."""
    return [b for b in obs.batches if b.started_s is None or b.started_s + b.busy_s > since_s]


def stale(obs: policy.Observation) -> bool:
    """No fresh metrics: every peer holds (as the HPA does when its metric is missing)."""
    return obs.metrics_age_s is None


def task_seconds(fixed_cost_s: float, batches: Sequence[BatchSample]) -> float:
    """The time the executors spent on ``batches``' records: each batch's time less the fixed
    cost every batch pays whatever its size (the driver's planning and scheduling). Spark's
    task metrics (``executorRunTime``) measure it directly; it is what Flink's
    ``busyTimeMsPerSecond`` and DS2's useful time count for a continuous operator."""
    return sum(max(0.0, b.busy_s - fixed_cost_s) for b in batches if b.records > 0)


def out_of_bounds(base: policy.PolicyConfig, obs: policy.Observation) -> policy.Decision | None:
    """A count outside ``[min, upper]`` is brought back first (every peer's controller
    enforces its bounds before reading a metric), else None."""
    asked = current(obs)
    bounded = clamp(base, obs, asked)
    if bounded == asked:
        return None
    reason = policy.Reason.BOUNDED_MIN if bounded > asked else policy.Reason.BOUNDED_MAX
    return decision(obs, bounded, reason)
