"""The micro-batch capacity model: fits, refusals, sizing; table-driven and hypothesis."""

from __future__ import annotations

import math
import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from streamscale.autoscale.capacity import (
    UNKNOWN,
    BatchSample,
    Capacity,
    CapacityMethod,
    executors_needed,
    fit,
    lower_bound,
    throughput,
)


def batches(
    fixed: float, rate: float, sizes: list[int], executors: int = 1, noise: float = 0.0
) -> list[BatchSample]:
    """Batches of ``sizes`` records taking ``fixed + records / (executors × rate)`` seconds,
    times multiplied by a seeded ±``noise``."""
    rng = random.Random(1)
    return [
        BatchSample(
            size,
            (fixed + size / (executors * rate)) * (1 + rng.uniform(-noise, noise)),
            executors,
            float(i),
        )
        for i, size in enumerate(sizes)
    ]


FIT_CASES = [
    # name, batches, executors now, expected (fixed, rate)
    ("small and large", batches(1.0, 30_000, [1600] * 8 + [20_000] * 4), 1, (1.0, 30_000)),
    ("a spread of sizes", batches(0.5, 1000, [200, 400, 800, 1600, 3200, 6400]), 1, (0.5, 1000)),
    ("no fixed cost", batches(0.0, 5000, [100, 1000, 10_000, 300, 3000, 30_000]), 1, (0, 5000)),
    (
        "executors normalise the size",
        batches(1.0, 10_000, [4000] * 4, executors=4) + batches(1.0, 10_000, [4000] * 4),
        1,
        (1.0, 10_000),
    ),
    (
        "unknown executors take the current count",
        [BatchSample(b.records, b.busy_s) for b in batches(0.3, 2000, [500, 1000, 4000] * 2, 2)],
        2,
        (0.3, 2000),
    ),
    (
        "a slow first batch is an outlier",
        [BatchSample(60_000, 30.0, 1, 0.0), *batches(1.0, 30_000, [1600] * 10 + [20_000] * 5)],
        1,
        (1.0, 30_000),
    ),
    (
        "noisy batches",
        batches(1.0, 20_000, [1500, 1700, 1600, 20_000, 20_000, 20_000, 9000, 1550], noise=0.03),
        1,
        (1.0, 20_000),
    ),
]


@pytest.mark.parametrize(
    ("samples", "executors", "expected"),
    [case[1:] for case in FIT_CASES],
    ids=[case[0] for case in FIT_CASES],
)
def test_fit_recovers_both_terms(
    samples: list[BatchSample], executors: int, expected: tuple[float, float]
) -> None:
    capacity = fit(samples, executors_now=executors, tasks_cap=8)
    assert capacity.method is CapacityMethod.FIT
    assert capacity.known
    assert capacity.fixed_cost_s == pytest.approx(expected[0], abs=0.05)
    assert capacity.rate == pytest.approx(expected[1], rel=0.1)


REFUSALS = [
    ("no batch", [], None, "0 batch"),
    ("too few", batches(1.0, 30_000, [1000, 20_000]), None, "3 needed"),
    ("all the same size", batches(1.0, 30_000, [1600] * 20), None, "too alike"),
    ("sizes within ×2", batches(1.0, 30_000, [1500, 1700, 2500, 2900, 1900] * 4), None, "alike"),
    ("one large batch only", batches(1.0, 30_000, [1600] * 20 + [20_000]), None, "alike"),
    ("empty batches are skipped", [BatchSample(0, 0.4, 1, float(i)) for i in range(9)], None, "0"),
    (
        "time does not grow with size",
        [BatchSample(size, 1.0, 1, 0.0) for size in (10, 100, 1000, 20, 200, 2000)],
        1.0,
        "does not grow",
    ),
]


@pytest.mark.parametrize(
    ("samples", "fixed", "note"),
    [case[1:] for case in REFUSALS],
    ids=[case[0] for case in REFUSALS],
)
def test_fit_refuses_rather_than_invents(
    samples: list[BatchSample], fixed: float | None, note: str
) -> None:
    capacity = fit(samples, executors_now=1, tasks_cap=8)
    assert capacity.method is CapacityMethod.UNKNOWN
    assert capacity.rate is None and not capacity.known
    assert capacity.fixed_cost_s == fixed
    assert note in capacity.note


def test_the_task_cap_bounds_the_executors_of_a_batch() -> None:
    # 4 executors on 2 tasks: two of them idled, so the batch ran on 2
    samples = batches(0.5, 1000, [1000, 2000, 4000, 8000, 500, 16_000], executors=2)
    four = [BatchSample(b.records, b.busy_s, 4, b.started_s) for b in samples]
    capacity = fit(four, executors_now=4, tasks_cap=2)
    assert capacity.rate == pytest.approx(1000, rel=0.01)


def test_lower_bound_is_records_over_busy_executor_seconds() -> None:
    samples = [BatchSample(3000, 1.0, 2), BatchSample(0, 0.2, 2), BatchSample(1000, 0.5, None)]
    bound = lower_bound(samples, executors_now=4, tasks_cap=8)
    assert bound.method is CapacityMethod.LOWER_BOUND
    assert bound.fixed_cost_s == 0.0
    assert bound.rate == pytest.approx(4000 / (1.0 * 2 + 0.5 * 4))
    assert lower_bound([], executors_now=1, tasks_cap=1).rate is None


KNOWN = Capacity(1.0, 10_000.0, CapacityMethod.FIT, 10)

NEEDED = [
    # name, load, interval, limit, cycle budget, expected executors
    ("nothing to do", 0.0, 1.0, None, 5.0, 0.0),
    # cycle 5 s: 4 s of records per executor per cycle → 8 000 rec/s per executor
    ("no limit", 16_000.0, 1.0, None, 5.0, 2.0),
    # the limit forces cycles of 20 000 / 40 000 = 0.5 s < the 1 s trigger: nobody keeps up
    ("the limit caps the throughput", 40_000.0, 1.0, 20_000, 5.0, math.inf),
    # cycle 20 000 / 10 000 = 2 s, half of it fixed → 5 000 rec/s per executor
    ("the limit shortens the cycle", 10_000.0, 1.0, 20_000, 5.0, 2.0),
    # budget 0.5 s under the 1 s fixed cost: stretched to 2 s
    ("a fixed cost above the budget", 5000.0, 0.0, None, 0.5, 1.0),
    # the trigger interval is the shortest cycle
    ("cycle at least the trigger", 5000.0, 10.0, None, 5.0, 5000 / 9000),
]


@pytest.mark.parametrize(
    ("load", "interval", "limit", "budget", "expected"),
    [case[1:] for case in NEEDED],
    ids=[case[0] for case in NEEDED],
)
def test_executors_needed(
    load: float, interval: float, limit: int | None, budget: float, expected: float
) -> None:
    got = executors_needed(
        load,
        KNOWN,
        trigger_interval_s=interval,
        max_records_per_trigger=limit,
        max_cycle_s=budget,
    )
    assert got == pytest.approx(expected)


def test_throughput_and_unknown_capacity() -> None:
    assert throughput(2, KNOWN, trigger_interval_s=1.0, max_records_per_trigger=None) == 20_000
    # 20 000 records in 1 + 20 000 / 20 000 = 2 s
    limited = throughput(2, KNOWN, trigger_interval_s=1.0, max_records_per_trigger=20_000)
    assert limited == pytest.approx(10_000)
    assert throughput(0, KNOWN, trigger_interval_s=1.0, max_records_per_trigger=None) == 0
    with pytest.raises(ValueError, match="unknown"):
        executors_needed(
            1.0, UNKNOWN, trigger_interval_s=1, max_records_per_trigger=None, max_cycle_s=5
        )
    with pytest.raises(ValueError, match="unknown"):
        UNKNOWN.batch_seconds(10, 1)
    assert KNOWN.batch_seconds(20_000, 2) == pytest.approx(2.0)


# --- properties ---------------------------------------------------------------------------


@given(
    fixed=st.floats(0.05, 5.0),
    rate=st.floats(100.0, 200_000.0),
    executors=st.integers(1, 4),
    seed=st.integers(0, 10**6),
)
def test_fit_recovers_known_parameters_from_noisy_batches(
    fixed: float, rate: float, executors: int, seed: int
) -> None:
    """Batches spanning small (a tenth of a second of records) to large (ten fixed costs of
    records), ±3 % noise on their time: both terms within 15 %."""
    rng = random.Random(seed)
    small = max(2, round(0.1 * rate * executors))
    large = max(small * 20, round(10 * fixed * rate * executors))
    samples = []
    for i in range(24):
        size = rng.choice([small, rng.randint(small, large), large])
        busy = (fixed + size / (executors * rate)) * (1 + rng.uniform(-0.03, 0.03))
        samples.append(BatchSample(size, busy, executors, float(i)))
    capacity = fit(samples, executors_now=executors, tasks_cap=8)
    assert capacity.known
    assert capacity.rate == pytest.approx(rate, rel=0.15)
    largest = fixed + large / (executors * rate)
    assert capacity.fixed_cost_s == pytest.approx(fixed, rel=0.15, abs=0.03 * largest)


@given(
    base=st.integers(100, 100_000),
    spread=st.lists(st.floats(1.0, 1.99), min_size=0, max_size=40),
    times=st.lists(st.floats(0.001, 100.0), min_size=40, max_size=40),
)
def test_batches_of_about_one_size_never_measure_a_rate(
    base: int, spread: list[float], times: list[float]
) -> None:
    """Small batches at lag 0 are all about the same size: whatever their times, no rate is
    read from them (so they can never read as a saturated executor)."""
    samples = [BatchSample(round(base * f), t, 1) for f, t in zip(spread, times, strict=False)]
    capacity = fit(samples, executors_now=1, tasks_cap=4)
    assert capacity.rate is None
