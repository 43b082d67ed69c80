"""The measured cost of a scale event, and the pause the next change is priced with."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from streamscale.autoscale.actuator import FakeActuator
from streamscale.autoscale.capacity import UNKNOWN, Capacity, CapacityMethod
from streamscale.autoscale.controller import Controller
from streamscale.autoscale.policy import PolicyConfig
from streamscale.autoscale.scale_cost import (
    BatchCost,
    ScaleCost,
    ScaleEvent,
    measure,
    next_pause,
)
from streamscale.lag.model import BatchStats, LagTracker, PartitionOffsets, ProgressSample

FIT = Capacity(0.5, 1000.0, CapacityMethod.FIT, 6)  # 0.5 s + records / (1000/s × executors)


def batch(
    start: float, busy: float, records: int = 1000, executors: int = 1, **kw: float
) -> BatchCost:
    return BatchCost(start, busy, records, executors, **kw)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("batches", "pause", "reloaded"),
    [
        # steady after the change: 1.5 s predicted for 1000 records on one executor
        ([batch(10, 1.5), batch(12, 1.5), batch(14, 1.5)], 0.0, 0),
        # the first batch after it reloads two state stores and runs 3 s over
        ([batch(10, 4.5, loaded=2, load_s=2.5), batch(15, 1.5), batch(17, 1.6)], 3.1, 2),
        # faster than the fit never makes a negative pause
        ([batch(10, 0.5), batch(11, 0.5), batch(12, 2.5)], 1.0, 0),
        # two executors after a scale-up: 1.0 s predicted
        (
            [batch(10, 2.0, executors=2), batch(12, 1.0, executors=2), batch(13, 1.0, executors=2)],
            1.0,
            0,
        ),
        # a batch that started before the change is not its cost
        ([batch(8, 9.0), batch(10, 1.5), batch(12, 1.5), batch(14, 2.5)], 1.0, 0),
    ],
)
def test_the_pause_is_the_busy_time_above_the_fit(
    batches: list[BatchCost], pause: float, reloaded: int
) -> None:
    cost = measure(ScaleEvent(10.0, 1, 2, FIT), batches)
    assert cost is not None
    assert cost.pause_s == pytest.approx(pause)
    assert cost.reloaded == reloaded and cost.batches == 3


def test_not_measured_before_the_window_or_without_a_fit() -> None:
    two = [batch(10, 3.0), batch(12, 3.0)]
    assert measure(ScaleEvent(10.0, 1, 2, FIT), two) is None
    assert measure(ScaleEvent(10.0, 1, 2, UNKNOWN), [*two, batch(14, 3.0)]) is None


@given(st.lists(st.floats(0.0, 30.0), min_size=3, max_size=10), st.integers(1, 8))
def test_the_pause_is_never_negative_nor_above_the_busy_time(busy: list[float], n: int) -> None:
    batches = [batch(10.0 + i, b, executors=n) for i, b in enumerate(busy)]
    cost = measure(ScaleEvent(10.0, 1, n, FIT), batches)
    assert cost is not None
    assert 0.0 <= cost.pause_s <= sum(busy[:3]) + 1e-9


def _cost(pause: float) -> ScaleCost:
    return ScaleCost(0.0, 1, 2, 3, pause, 0, 0.0, 0)


@pytest.mark.parametrize(
    ("pauses", "expected"),
    [([], 5.0), ([2.0], 2.0), ([1.0, 3.0], 2.0), ([100.0, 1.0, 2.0, 3.0], 2.0)],
)
def test_the_next_change_is_priced_with_the_last_three(
    pauses: list[float], expected: float
) -> None:
    assert next_pause([_cost(p) for p in pauses], 5.0) == pytest.approx(expected)


def test_the_controller_measures_each_change_and_prices_the_next_with_it(tmp_path: Path) -> None:
    tracker = LagTracker()
    clock = [1_000.0]
    actuator = FakeActuator(current=1, max_executors=2)
    controller = Controller(
        "q",
        tracker,
        actuator,
        PolicyConfig(min_executors=1, max_executors=2, restart_pause_s=5.0),
        interval_s=5,
        decision_log=tmp_path / "d.jsonl",
        clock=lambda: clock[0],
    )
    offset = batch_id = 0

    def feed(busy: float, records: int, lag: int, loaded: int = 0) -> None:
        nonlocal offset, batch_id
        offset += records
        batch_id += 1
        clock[0] += busy
        stats = BatchStats(batch_id, clock[0], records, busy, busy, loaded)
        parts = (PartitionOffsets("in", 0, offset + lag, offset), PartitionOffsets("in", 1, lag, 0))
        tracker.ingest(ProgressSample("q", clock[0], parts, stats))

    # steady batches of 0.5 s + records / 1,000/s on one executor, a growing backlog
    for i in range(6):
        feed(0.5 + (1000 if i % 2 else 4000) / 1000, 1000 if i % 2 else 4000, 200_000 + i * 50_000)
    record = controller.step()
    assert record.direction == "up" and actuator.running() == 2
    assert record.priced_pause_s == 5.0
    # three batches after the change, the first reloading state: 4 s above the fit
    feed(6.0 + 1.25, 4000, 300_000, loaded=3)
    feed(0.5 + 0.5, 1000, 280_000)
    feed(0.5 + 2.0, 4000, 260_000)
    record = controller.step()
    assert len(record.scale_costs) == 1
    cost = record.scale_costs[0]
    assert cost["before"] == 1 and cost["after"] == 2 and cost["reloaded"] == 3
    assert float(cost["pause_s"]) > 0
    assert record.priced_pause_s == pytest.approx(float(cost["pause_s"]), abs=1e-3)
    assert controller.priced_pause_s == pytest.approx(controller.costs[0].pause_s)
    assert tracker.scale_costs()["q"][1] == 3
    assert '"scale_costs":[{' in (tmp_path / "d.jsonl").read_text()
