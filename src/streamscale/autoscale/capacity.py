"""Processing capacity of a micro-batch query, from its recent batches (pure, no I/O).

A micro-batch of ``x`` records run by ``n`` executors takes about::

    busy ≈ fixed_cost + x / (n × rate)

``fixed_cost`` (seconds per batch) is what every trigger pays whatever its size: planning,
offset and commit logs, job scheduling, Python workers. ``rate`` (records/s per executor) is
what an executor does with the records. Dividing records by busy time, as a per-second
estimate does, reads a pipeline that runs small batches at lag 0 as saturated: a 1 600-record
batch that takes 1.1 s, 1 s of it fixed cost, is an executor doing 16 000 records/s, not 1 450.

:func:`fit` estimates both terms with a Theil–Sen line through ``(records per executor, busy
seconds)`` over the batches, restricted to pairs of batches whose sizes differ by at least a
factor :data:`MIN_SIZE_RATIO`: pairs of near-equal batches only measure noise, and the median of
slopes over the others ignores a few outliers (the slow first batch after a start). It refuses
to answer — ``rate`` None, with a note saying why — when batches are too few, all about the same
size, or when their time does not grow measurably with their size. Unknown is unknown: it never
invents a rate.

:func:`executors_needed` turns a fitted capacity into executors for a load: with a trigger
interval and a batch-size limit (``maxOffsetsPerTrigger``), a cycle of ``T`` seconds carries at
most ``(T − fixed_cost) × rate`` records per executor, and ``T`` is at least the trigger interval
and at most what the batch limit and the latency budget allow.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

MIN_SIZE_RATIO = 2.0
"""Two batches inform the slope only when one carries at least this many times the records
(per executor) of the other."""

MIN_SUPPORT = 3
"""A fit needs this many distinct batches on each side of its pairs (the small and the large)."""

SIGNIFICANCE = 3.0
"""The size-dependent time across a typical pair must exceed this many robust residual
deviations, or the rate is not measurable from these batches."""


@dataclass(frozen=True)
class BatchSample:
    """One completed micro-batch: records processed and the time the trigger took."""

    records: int
    busy_s: float
    executors: int | None = None
    """Executors that ran the batch (None: the observation's current count)."""
    started_s: float | None = None
    """When the batch started (seconds, the observation's clock); None when unknown."""


class CapacityMethod(StrEnum):
    """Where a capacity estimate comes from."""

    FIT = "fit"
    """Fitted on the batches of this observation."""
    REMEMBERED = "remembered"
    """The last fit; the batches of this observation cannot be fitted."""
    LOWER_BOUND = "lower_bound"
    """Records over busy executor-seconds (fixed cost taken as 0): never above the true rate."""
    UNKNOWN = "unknown"


@dataclass(frozen=True)
class Capacity:
    """Fixed cost per batch and records/s per executor (None where unknown), and why."""

    fixed_cost_s: float | None
    rate: float | None
    method: CapacityMethod
    batches: int
    """Batches the estimate is based on."""
    note: str = ""
    fitted_s: float | None = None
    """Time of the observation the fit was made at (for a remembered fit)."""

    @property
    def known(self) -> bool:
        return self.rate is not None and self.rate > 0 and self.fixed_cost_s is not None

    def batch_seconds(self, records: float, executors: int) -> float:
        """Predicted busy time of a batch (requires :attr:`known`)."""
        if self.rate is None or self.fixed_cost_s is None:
            raise ValueError("capacity unknown")
        return self.fixed_cost_s + records / (max(1, executors) * self.rate)


UNKNOWN = Capacity(None, None, CapacityMethod.UNKNOWN, 0, "no batch")


def _usable(
    batches: Sequence[BatchSample], executors_now: int, tasks_cap: int
) -> list[tuple[int, int, float]]:
    """``(records, executors, busy seconds)`` of the batches that measure something."""
    usable = []
    for batch in batches:
        n = executors_now if batch.executors is None else batch.executors
        n = min(n, max(1, tasks_cap))
        if batch.records <= 0 or n <= 0:
            continue
        if not (math.isfinite(batch.busy_s) and batch.busy_s > 0):
            continue
        usable.append((batch.records, n, batch.busy_s))
    return usable


def fit(
    batches: Sequence[BatchSample],
    *,
    executors_now: int,
    tasks_cap: int,
    min_batches: int = 3,
) -> Capacity:
    """Fixed cost and per-executor rate from ``batches`` (method in the module docstring).

    Batches with no record or no measured time are skipped (an idle trigger measures no rate).
    ``executors_now`` stands for a batch's unknown executor count; counts above ``tasks_cap``
    (the tasks a batch has) are capped: more executors than tasks idle.
    """
    points = [(r / e, y) for r, e, y in _usable(batches, executors_now, tasks_cap)]
    n = len(points)
    if n < max(2, min_batches):
        return Capacity(
            None, None, CapacityMethod.UNKNOWN, n, f"{n} batch(es), {min_batches} needed"
        )
    slopes: list[float] = []
    spans: list[float] = []
    small: set[int] = set()
    large: set[int] = set()
    for i, (xi, yi) in enumerate(points):
        for j, (xj, yj) in enumerate(points):
            if xj >= MIN_SIZE_RATIO * xi:
                slopes.append((yj - yi) / (xj - xi))
                spans.append(xj - xi)
                small.add(i)
                large.add(j)
    if min(len(small), len(large)) < MIN_SUPPORT:
        return Capacity(
            None,
            None,
            CapacityMethod.UNKNOWN,
            n,
            f"batch sizes too alike: {min(len(small), len(large))} batch(es) "
            f"differing ×{MIN_SIZE_RATIO:g}, {MIN_SUPPORT} needed on each side",
        )
    slope = statistics.median(slopes)
    fixed = statistics.median(y - slope * x for x, y in points)
    if fixed < 0:  # noise around a negligible fixed cost: a line through the origin
        fixed = 0.0
        slope = statistics.median(y / x for x, y in points)
    residuals = [y - fixed - slope * x for x, y in points]
    spread = 1.4826 * statistics.median(abs(r) for r in residuals)
    explained = slope * statistics.median(spans)
    if slope <= 0 or explained <= SIGNIFICANCE * spread:
        return Capacity(
            round(statistics.median(y for _, y in points), 6),
            None,
            CapacityMethod.UNKNOWN,
            n,
            "batch time does not grow measurably with batch size",
        )
    return Capacity(
        fixed, 1.0 / slope, CapacityMethod.FIT, n, f"Theil–Sen over {len(slopes)} pairs"
    )


def lower_bound(batches: Sequence[BatchSample], *, executors_now: int, tasks_cap: int) -> Capacity:
    """Records over busy executor-seconds, the fixed cost taken as 0: a rate never above the
    true one (equal when batches are large), for use only where a backlog shows saturation."""
    usable = _usable(batches, executors_now, tasks_cap)
    if not usable:
        return Capacity(None, None, CapacityMethod.UNKNOWN, 0, "no batch")
    records = sum(r for r, _, _ in usable)
    busy = sum(n * y for _, n, y in usable)
    return Capacity(
        0.0, records / busy, CapacityMethod.LOWER_BOUND, len(usable), "fixed cost taken as 0"
    )


def executors_needed(
    load: float,
    capacity: Capacity,
    *,
    trigger_interval_s: float,
    max_records_per_trigger: int | None,
    max_cycle_s: float,
) -> float:
    """Fractional executor count that processes ``load`` records/s (``inf``: none can).

    In a steady cycle of ``T`` seconds a batch carries ``load × T`` records and must end
    within the cycle: ``fixed_cost + load × T / (n × rate) <= T``, so
    ``n >= load / (rate × (1 − fixed_cost / T))``. The longest admissible cycle is best: ``T``
    is at most ``max_cycle_s`` (stretched to twice the fixed cost when that is longer, so that
    a large fixed cost is not itself a verdict) and ``max_records_per_trigger / load`` (the batch
    limit), at least ``trigger_interval_s``. When the batch limit forces the cycle under the
    trigger interval or under the fixed cost, no executor count keeps up: ``inf``.
    """
    if capacity.rate is None or capacity.fixed_cost_s is None or capacity.rate <= 0:
        raise ValueError("capacity unknown")
    if load <= 0:
        return 0.0
    fixed = capacity.fixed_cost_s
    cycle = max(max_cycle_s, 2 * fixed, trigger_interval_s)
    if max_records_per_trigger is not None:
        cycle = min(cycle, max_records_per_trigger / load)
    if cycle < trigger_interval_s or cycle <= fixed:
        return math.inf
    return load / (capacity.rate * (1 - fixed / cycle))


def throughput(
    executors: int,
    capacity: Capacity,
    *,
    trigger_interval_s: float,
    max_records_per_trigger: int | None,
) -> float:
    """Records/s ``executors`` process when saturated: back-to-back batches at the limit, or
    ``rate`` per executor when batches are unlimited (the fixed cost then amortizes away)."""
    if capacity.rate is None or capacity.fixed_cost_s is None or capacity.rate <= 0:
        raise ValueError("capacity unknown")
    n = max(0, executors)
    if n == 0:
        return 0.0
    if max_records_per_trigger is None:
        return n * capacity.rate
    b = max_records_per_trigger
    return b / max(trigger_interval_s, capacity.fixed_cost_s + b / (n * capacity.rate))
