"""The measured cost of a scale event, and the pause the next change is priced with."""

from __future__ import annotations

from dataclasses import replace
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
    Price,
    ScaleCost,
    ScaleEvent,
    executor_start,
    measure,
    moved_share,
    pause_for,
    price,
    reload_estimate,
    start_price,
)
from streamscale.lag.model import (
    BatchStats,
    LagTracker,
    PartitionOffsets,
    ProgressSample,
    StateOperatorStats,
)

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


BOUND = Capacity(0.0, 1000.0, CapacityMethod.LOWER_BOUND, 6)  # fixed cost taken as 0


@pytest.mark.parametrize(
    ("batches", "pause"),
    [
        # 1 s of fixed cost a batch (the two settled ones), 0.5 s of records at 2 executors:
        # 2 s above that in the first batch after the change
        ([batch(10, b, executors=2) for b in (3.5, 1.5, 1.5, 1.5, 1.5)], 2.0),
        # the settled batches' records differ: the bound's rate prices them
        (
            [
                *(batch(10, b, 1000, 2) for b in (3.5, 1.5, 1.5)),
                batch(20, 3.0, 4000, 2),
                batch(23, 3.0, 4000, 2),
            ],
            2.0,
        ),
        # the demo's scale-out on the state store (2026-11-26 17:10): 20,000-record batches
        # on 2 executors, measured against the bound alone 7.87 s
        (
            [batch(10, b, 20_000, 2) for b in (7.232, 3.729, 2.559, 3.065, 2.970)],
            4.927,
        ),
    ],
)
def test_a_change_decided_on_a_lower_bound_is_measured_against_the_settled_batches(
    batches: list[BatchCost], pause: float
) -> None:
    capacity = BOUND if batches[0].records < 20_000 else replace(BOUND, rate=5306.0)
    cost = measure(ScaleEvent(10.0, 1, 2, capacity), batches)
    assert cost is not None and cost.batches == 3
    assert cost.pause_s == pytest.approx(pause, abs=1e-3)


def test_a_lower_bound_waits_for_settled_batches_at_the_new_count() -> None:
    event = ScaleEvent(10.0, 1, 2, BOUND)
    four = [batch(10 + i, 1.5, executors=2) for i in range(4)]
    assert measure(event, four) is None
    assert measure(event, [*four, batch(15, 1.5, executors=3)]) is None  # another count
    assert measure(event, [*four, batch(15, 1.5, executors=2)]) is not None


def test_a_cost_reads_back_what_it_wrote() -> None:
    measured = ScaleCost(12.5, 1, 2, 3, 4.25, 2, 0.5, 1024, 3e6)
    assert ScaleCost.from_dict(measured.as_dict()) == measured
    older = ScaleCost.from_dict({"pause_s": 15.0, "before": 1, "after": 2})  # before load_s
    assert (older.state_s, older.base_s) == (0.0, 15.0)


def test_not_measured_before_the_window_or_without_a_fit() -> None:
    two = [batch(10, 3.0), batch(12, 3.0)]
    assert measure(ScaleEvent(10.0, 1, 2, FIT), two) is None
    assert measure(ScaleEvent(10.0, 1, 2, UNKNOWN), [*two, batch(14, 3.0)]) is None


@pytest.mark.parametrize(
    ("own", "known", "pause"),
    [
        # decided before any fit (the lag policy on batches at the limit): the fit known when
        # its batches have run measures it
        (UNKNOWN, FIT, 3.0),
        # its own fit wins over a later one
        (FIT, replace(FIT, fixed_cost_s=2.0), 3.0),
        # still none known: not measured (a pause is never made up)
        (UNKNOWN, UNKNOWN, None),
    ],
)
def test_a_change_decided_without_a_fit_is_measured_with_the_one_known_after(
    own: Capacity, known: Capacity, pause: float | None
) -> None:
    batches = [batch(10, 4.5), batch(15, 1.5), batch(17, 1.5)]
    cost = measure(ScaleEvent(10.0, 1, 2, own), batches, known=known)
    assert (None if cost is None else cost.pause_s) == (
        None if pause is None else pytest.approx(pause)
    )


def test_executors_lost_count_the_batch_in_flight_and_price_no_change() -> None:
    """A loss is measured from the batch that ran when the driver removed the executor (its
    tasks there ran again elsewhere); a change's measure leaves that batch out. The loss
    prices no change: its pause holds the time the cluster took to notice it."""
    over = batch(4, 1.5)  # over before the loss
    in_flight = batch(8, 9.0, loaded=2, load_s=1.0)  # 7.5 s above the fit
    after = [batch(17, 1.5), batch(19, 1.5), batch(21, 1.5)]
    lost = measure(ScaleEvent(10.0, 2, 1, FIT, lost=True), [over, in_flight, *after])
    assert lost is not None and lost.lost
    assert (lost.pause_s, lost.reloaded, lost.batches) == (pytest.approx(7.5), 2, 3)
    change = measure(ScaleEvent(10.0, 2, 1, FIT), [over, in_flight, *after])
    assert change is not None and not change.lost and change.pause_s == pytest.approx(0.0)
    assert ScaleCost.from_dict(lost.as_dict()) == lost
    assert price([lost], 5.0) == Price(5.0, 0.0)
    assert price([cost(8.0, load=1.0, size=1e6), lost], 5.0, 1e6) == price(
        [cost(8.0, load=1.0, size=1e6)], 5.0, 1e6
    )


@given(st.lists(st.floats(0.0, 30.0), min_size=3, max_size=10), st.integers(1, 8))
def test_the_pause_is_never_negative_nor_above_the_busy_time(busy: list[float], n: int) -> None:
    batches = [batch(10.0 + i, b, executors=n) for i, b in enumerate(busy)]
    cost = measure(ScaleEvent(10.0, 1, n, FIT), batches)
    assert cost is not None
    assert 0.0 <= cost.pause_s <= sum(busy[:3]) + 1e-9


@pytest.mark.parametrize(
    ("before", "after", "share"),
    [(2, 2, 0.0), (1, 2, 0.5), (2, 1, 0.5), (2, 8, 0.75), (8, 6, 0.25), (0, 1, 1.0)],
)
def test_the_share_of_the_state_a_change_moves(before: int, after: int, share: float) -> None:
    assert moved_share(before, after) == pytest.approx(share)


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        ([], 0.0),  # nothing measured: the configured pause alone
        ([(5.0, 1, 2)], 0.0),  # a pause no longer than the base: no state cost
        ([(15.0, 1, 2)], 20.0),  # 10 s above the base for half the state: 20 s for all of it
        ([(15.0, 1, 2), (35.0, 4, 2)], 40.0),  # the state grew: the mean of both
        ([(99.0, 1, 2), (5.0, 1, 2), (5.0, 1, 2), (15.0, 2, 1)], 20 / 3),  # the last three
        ([(30.0, 2, 2)], 0.0),  # no change of count moves no state
    ],
)
def test_the_whole_state_reload_is_estimated_from_the_last_changes(
    changes: list[tuple[float, int, int]], expected: float
) -> None:
    assert reload_estimate(changes, 5.0) == pytest.approx(expected)


@pytest.mark.parametrize(
    ("sizes", "state_bytes", "expected"),
    [
        ([], 4e8, 20.0),  # sizes unknown: as measured
        ([2e8], 0.0, 20.0),  # the state now unknown: as measured
        ([2e8], 4e8, 40.0),  # the state doubled since: twice the reload
        ([2e8], 1e8, 10.0),  # it halved: half
        ([0.0], 4e8, 20.0),  # that change's size unknown: as measured
        ([32_192.0], 6_404_160.0, 20.0),  # a state under 1 MB timed the stores' opening
        ([1e6], 2e6, 40.0),  # from 1 MB on, scaled
    ],
)
def test_the_reload_is_priced_for_the_state_size_now(
    sizes: list[float], state_bytes: float, expected: float
) -> None:
    assert reload_estimate([(15.0, 1, 2)], 5.0, sizes, state_bytes) == pytest.approx(expected)


@given(st.floats(0, 60), st.floats(0, 600), st.integers(1, 16), st.integers(1, 16))
def test_a_measured_pause_is_priced_back_exactly(
    base: float, reload_s: float, before: int, after: int
) -> None:
    pause = pause_for(base, reload_s, before, after)
    if before == after:
        assert pause == 0.0
    else:
        assert reload_estimate([(pause, before, after)], base) == pytest.approx(reload_s, abs=1e-6)


def cost(
    pause: float, before: int = 1, after: int = 2, load: float = 0.0, size: float = 0.0
) -> ScaleCost:
    return ScaleCost(0.0, before, after, 3, pause, 0, load, 0, size)


@pytest.mark.parametrize(
    ("pause", "load", "state", "base"),
    [
        (8.0, 0.0, 0.0, 8.0),  # nothing loaded: the change's own pause
        (8.0, 3.0, 3.0, 5.0),  # 3 s of it loading state
        (2.0, 3.0, 2.0, 0.0),  # loads summed over tasks ran in parallel: at most the pause
        (0.0, 1.0, 0.0, 0.0),
    ],
)
def test_a_pause_splits_into_the_state_loaded_and_the_rest(
    pause: float, load: float, state: float, base: float
) -> None:
    measured = cost(pause, load=load)
    assert measured.state_s == pytest.approx(state)
    assert measured.base_s == pytest.approx(base)


@pytest.mark.parametrize(
    ("costs", "state_bytes", "expected"),
    [
        ([], 4e8, Price(5.0, 0.0)),  # nothing measured: the configured pause, no reload
        ([cost(8.0)], 4e8, Price(8.0, 0.0)),  # executors starting, no state loaded
        ([cost(8.0, load=2.0)], 0.0, Price(6.0, 4.0)),  # 2 s for half the state: 4 s for all
        ([cost(8.0, load=2.0, size=2e8)], 4e8, Price(6.0, 8.0)),  # the state doubled since
        ([cost(8.0, size=2e8)], 4e8, Price(8.0, 0.0)),  # ... the base does not grow with it
        ([cost(8.0, 2, 2, load=2.0)], 0.0, Price(5.0, 0.0)),  # no change of count: not priced
        (  # the last three
            [cost(99.0, load=99.0), cost(4.0), cost(6.0, load=1.0), cost(6.0, 2, 1, load=1.0)],
            0.0,
            Price(14 / 3, 4 / 3),
        ),
        # the demo's first scale-out on the state store (2026-11-26): 7.87 s, 0.047 s of it
        # loading state at 3.1 MB, priced once the state had grown to 44.8 MB: the whole pause
        # scaled by that growth priced it at (7.87 - 5) / 0.5 * 14.4 = 83 s
        ([cost(7.867, load=0.047, size=3_108_686)], 44_810_443, Price(7.82, 1.355)),
    ],
)
def test_the_next_change_is_priced_from_the_last_ones(
    costs: list[ScaleCost], state_bytes: float, expected: Price
) -> None:
    priced = price(costs, 5.0, state_bytes)
    assert priced.base_s == pytest.approx(expected.base_s, abs=1e-3)
    assert priced.reload_s == pytest.approx(expected.reload_s, abs=1e-3)


@given(
    st.floats(0, 60),
    st.floats(0, 600),
    st.integers(1, 16),
    st.integers(1, 16),
    st.floats(1e6, 1e10),
    st.floats(0.1, 10),
)
def test_a_measured_pause_is_priced_back_exactly_at_any_state_size(
    base: float, reload_s: float, before: int, after: int, size: float, growth: float
) -> None:
    """A change whose pause is ``base`` plus the moved share of a whole-state reload of
    ``reload_s`` (its load time) prices the next at ``base`` plus ``reload_s`` scaled by the
    state's growth."""
    if before == after:
        return
    load = reload_s * moved_share(before, after)
    measured = cost(base + load, before, after, load=load, size=size)
    priced = price([measured], 5.0, size * growth)
    assert priced.base_s == pytest.approx(base, abs=1e-6)
    assert priced.reload_s == pytest.approx(reload_s * growth, rel=1e-6, abs=1e-6)


class FedController:
    """A controller (1-2 executors, a 5 s base pause) on a query fed by hand: :meth:`feed`
    ingests one batch's progress; ``state_bytes`` is the state's size its stateful operator
    reports (none reported while None)."""

    def __init__(self, decision_log: Path | None = None) -> None:
        self.tracker = LagTracker()
        self.clock = 1_000.0
        self.actuator = FakeActuator(current=1, max_executors=2)
        self.controller = Controller(
            "q",
            self.tracker,
            self.actuator,
            PolicyConfig(min_executors=1, max_executors=2, restart_pause_s=5.0),
            interval_s=5,
            decision_log=decision_log,
            clock=lambda: self.clock,
        )
        self.offset = self.batch_id = 0
        self.state_bytes: int | None = None

    def feed(
        self, busy: float, records: int, lag: int, loaded: int = 0, load_s: float = 0.0
    ) -> None:
        self.offset += records
        self.batch_id += 1
        self.clock += busy
        stats = BatchStats(self.batch_id, self.clock, records, busy, busy, loaded, load_s)
        parts = (
            PartitionOffsets("in", 0, self.offset + lag, self.offset),
            PartitionOffsets("in", 1, lag, 0),
        )
        state = (
            ()
            if self.state_bytes is None
            else (StateOperatorStats("agg", 8, 1000, 10, 0, 5_000, 0.01, 8, self.state_bytes),)
        )
        self.tracker.ingest(ProgressSample("q", self.clock, parts, stats, state))

    def backlog(self) -> None:
        """Steady batches of 0.5 s + records / 1,000/s on one executor, a growing backlog."""
        for i in range(6):
            records = 1000 if i % 2 else 4000
            self.feed(0.5 + records / 1000, records, 200_000 + i * 50_000)


def test_the_controller_measures_each_change_and_prices_the_next_with_it(tmp_path: Path) -> None:
    fed = FedController(tmp_path / "d.jsonl")
    controller = fed.controller
    fed.backlog()
    record = controller.step()
    assert record.direction == "up" and fed.actuator.running() == 2
    assert record.state_reload_s == 0.0 and record.restart_pause_s == 5.0
    # three batches after the change, the first reloading state (2 s of loading)
    fed.feed(6.0 + 1.25, 4000, 300_000, loaded=3, load_s=2.0)
    fed.feed(0.5 + 0.5, 1000, 280_000)
    fed.feed(0.5 + 2.0, 4000, 260_000)
    record = controller.step()
    assert len(record.scale_costs) == 1
    measured = record.scale_costs[0]
    assert measured["before"] == 1 and measured["after"] == 2 and measured["reloaded"] == 3
    pause = float(measured["pause_s"])
    assert pause > 2.0 and measured["load_s"] == 2.0
    # priced from now on: the 2 s of loading over the half of the state it moved, and the
    # rest of the pause as measured in place of the configured 5 s
    assert record.state_reload_s == pytest.approx(4.0, abs=1e-3)
    assert record.restart_pause_s == pytest.approx(pause - 2.0, abs=1e-3)
    assert controller.price == Price(pytest.approx(pause - 2.0), pytest.approx(4.0))
    assert fed.tracker.scale_costs()["q"] == pytest.approx((pause, 3, 4.0, pause - 2.0))
    assert '"scale_costs":[{' in (tmp_path / "d.jsonl").read_text()


def test_the_controller_prices_the_reload_for_the_state_size_now() -> None:
    """The state's size (RocksDB SST bytes in the progress) is kept with each scale event;
    when the state has doubled since, the next change is priced twice as dear."""
    fed = FedController()
    controller = fed.controller
    fed.state_bytes = 100_000_000
    fed.backlog()
    assert controller.step().direction == "up"
    assert controller.state_bytes == 100_000_000
    fed.feed(6.0 + 1.25, 4000, 300_000, load_s=2.0)
    fed.feed(0.5 + 0.5, 1000, 280_000)
    fed.feed(0.5 + 2.0, 4000, 260_000)
    record = controller.step()
    assert record.scale_costs[0]["state_bytes"] == 100_000_000
    base = controller.price.base_s
    assert controller.state_reload_s == pytest.approx(4.0)
    fed.state_bytes = 200_000_000  # the state doubled
    fed.feed(0.5 + 2.0, 4000, 240_000)
    controller.step()
    assert controller.state_reload_s == pytest.approx(8.0)
    assert controller.price.base_s == pytest.approx(base)  # the base does not grow


def test_the_controller_measures_executors_lost_and_prices_no_change_with_them(
    tmp_path: Path,
) -> None:
    """An executor lost mid-batch: the decision log gives its cost (the batch in flight and
    the next two, the state they reloaded) as a scale event marked ``lost``, /metrics its
    pause; the next change is still priced from changes only."""
    fed = FedController(tmp_path / "d.jsonl")
    controller = fed.controller
    fed.backlog()
    assert controller.step().direction == "up"
    fed.feed(6.0 + 1.25, 4000, 300_000)
    fed.feed(0.5 + 0.5, 1000, 280_000)
    fed.feed(0.5 + 2.0, 4000, 260_000)
    priced = controller.step().restart_pause_s
    assert fed.actuator.running() == 2
    # lost 1 s into the next batch, which runs 4 s over the fit and reloads 2 state stores
    fed.actuator.lose_executor("Command exited with code 137", time_s=fed.clock + 1.0)
    record = controller.step()
    assert record.lost == (("1", "Command exited with code 137"),)
    assert record.scale_costs == ()
    fed.feed(4.0 + 0.5 + 4.0, 4000, 240_000, loaded=2, load_s=1.5)
    fed.feed(0.5 + 1.0, 1000, 230_000)
    fed.feed(0.5 + 1.0, 1000, 220_000)
    record = controller.step()
    (measured,) = record.scale_costs
    assert (measured["before"], measured["after"], measured["lost"]) == (2, 1, True)
    assert measured["reloaded"] == 2 and float(measured["pause_s"]) == pytest.approx(4.0)
    assert record.restart_pause_s == priced and record.state_reload_s == 0.0
    assert fed.tracker.loss_costs()["q"] == (pytest.approx(4.0), 2)
    assert fed.tracker.scale_costs()["q"][0] != pytest.approx(4.0)  # the change's, kept
    assert '"lost":true' in (tmp_path / "d.jsonl").read_text()


def test_the_simulator_calibrates_the_state_reload_from_a_decision_log() -> None:
    """As the controller prices it: from the time each change's stateful operators spent
    loading state, over the share of the state it moved; the rest of a pause is no reload."""
    from streamscale.autoscale import simulator

    def record(t: float, costs: list[dict[str, float]]) -> dict[str, object]:
        return {"time": t, "running": 1, "desired": 1, "outcome": "held", "scale_costs": costs}

    log = [
        record(0.0, []),
        # 10 s of loading for half the state: 20 s for all of it
        record(10.0, [{"pause_s": 15.0, "before": 1, "after": 2, "load_s": 10.0}]),
        # 20 s of loading for half: 40 s
        record(20.0, [{"pause_s": 25.0, "before": 4, "after": 2, "load_s": 20.0}]),
        # a pause of executors starting, nothing loaded: no reload
        record(30.0, [{"pause_s": 8.0, "before": 2, "after": 3}]),
        # an executor lost: its reload is no change's
        record(40.0, [{"pause_s": 30.0, "before": 3, "after": 2, "load_s": 30.0, "lost": True}]),
    ]
    calibration = simulator.calibrate(log)
    assert [(c.pause_s, c.before, c.after, c.state_s) for c in calibration.pauses] == [
        (15.0, 1, 2, 10.0),
        (25.0, 4, 2, 20.0),
        (8.0, 2, 3, 0.0),
        (30.0, 3, 2, 30.0),
    ]
    model = simulator.ClusterModel(rescale_pause_s=5)
    fitted = simulator.Calibration(FIT, 6, None, None, calibration.pauses).apply(model)
    assert fitted.state_reload_s == pytest.approx(20.0)
    assert fitted.pause_s(2, 3, 0.0) == pytest.approx(5.0 + 20.0 / 3)
    assert fitted.pause_s(3, 3, 0.0) == 0.0


def test_a_change_decided_without_a_fit_is_measured_against_the_last_known_capacity(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A scale-in at lag 0 sees only small batches, which fit no capacity (the demo's scale-in
    was decided with capacity ``unknown``): its pause is measured against the last capacity a
    decision knew, not left unmeasured. The policy is scripted here: what is tested is the
    controller's bookkeeping of scale events."""
    from streamscale.autoscale import controller as controller_module
    from streamscale.autoscale.policy import Decision, Reason

    known = Capacity(0.5, 1000.0, CapacityMethod.FIT, 6)
    script = iter(
        [
            Decision(2, Reason.SCALE_UP_BACKLOG, 1, 2.0, known),
            Decision(2, Reason.HOLD_STEADY, 2, 2.0, known),
            Decision(1, Reason.SCALE_DOWN_IDLE, 2, 0.0, UNKNOWN),
            Decision(1, Reason.HOLD_STEADY, 1, 0.0, UNKNOWN),
        ]
    )
    monkeypatch.setattr(
        controller_module, "decide", lambda config, state, obs: (next(script), state)
    )
    tracker = LagTracker()
    clock = [1_000.0]
    actuator = FakeActuator(current=1, max_executors=2)
    controller = Controller(
        "q",
        tracker,
        actuator,
        PolicyConfig(min_executors=1, max_executors=2),
        interval_s=5,
        decision_log=tmp_path / "d.jsonl",
        clock=lambda: clock[0],
    )
    batch_id = 0

    def feed(busy: float, records: int) -> None:
        nonlocal batch_id
        batch_id += 1
        clock[0] += busy
        stats = BatchStats(batch_id, clock[0], records, busy, busy)
        tracker.ingest(ProgressSample("q", clock[0], (PartitionOffsets("in", 0, 0, 0),), stats))

    feed(1.0, 500)
    assert controller.step().direction == "up"
    for _ in range(3):  # three batches after the scale-out: 1 s above the fit each
        feed(0.5 + 1000 / 2000 + 1.0, 1000)
    assert [c["after"] for c in controller.step().scale_costs] == [2]
    assert controller.step().direction == "down"
    for _ in range(3):  # three small batches after the scale-in, the first reloading state
        feed(0.5 + 2 / 1000 + (3.0 if _ == 0 else 0.0), 2)
    record = controller.step()
    assert [(c["before"], c["after"]) for c in record.scale_costs] == [(2, 1)]
    assert float(record.scale_costs[0]["pause_s"]) == pytest.approx(3.0, abs=0.01)


def test_a_change_decided_before_any_fit_is_measured_once_a_decision_knows_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The ``lag`` policy scales out on a backlog whose batches all run at the batch limit:
    no fit, no capacity at the change. Its pause is measured with the fit a later decision
    knows (the batches after the change, at other sizes, give one), not left unmeasured. The
    policy is scripted: what is tested is the controller's bookkeeping."""
    from streamscale.autoscale import controller as controller_module
    from streamscale.autoscale.policy import Decision, Reason

    known = Capacity(0.5, 1000.0, CapacityMethod.FIT, 6)
    script = iter(
        [
            Decision(2, Reason.SCALE_UP_BACKLOG, 1, 2.0, UNKNOWN),
            Decision(2, Reason.HOLD_STEADY, 2, 2.0, known),
            Decision(2, Reason.HOLD_STEADY, 2, 2.0, known),
        ]
    )
    monkeypatch.setattr(
        controller_module, "decide", lambda config, state, obs: (next(script), state)
    )
    fed = FedController(tmp_path / "d.jsonl")
    controller = fed.controller
    fed.feed(4.5, 4000, lag=0)
    assert controller.step().direction == "up"
    for extra in (2.0, 0.0, 0.0):  # after the change: 0.5 s + 1000 records / 2 executors
        fed.feed(0.5 + 1000 / 2000 + extra, 1000, lag=0)
    assert controller.step().scale_costs == ()  # no fit known yet when this step measured
    record = controller.step()
    assert [(c["before"], c["after"]) for c in record.scale_costs] == [(1, 2)]
    assert float(record.scale_costs[0]["pause_s"]) == pytest.approx(2.0, abs=0.01)


@pytest.mark.parametrize(
    ("requested", "wanted", "registered", "expected"),
    [
        (100.0, 1, [], None),  # nothing registered yet
        (100.0, 1, [99.0], None),  # registered before the request: not this scale-out's
        (100.0, 1, [104.5], 4.5),
        (100.0, 2, [104.5], None),  # one of two
        (100.0, 2, [107.0, 104.5, 90.0], 7.0),  # the last of the two, whatever the order
        (100.0, 0, [104.5], None),
    ],
)
def test_an_executor_start_is_the_request_to_the_last_registration(
    requested: float, wanted: int, registered: list[float], expected: float | None
) -> None:
    assert executor_start(requested, wanted, registered) == expected


@pytest.mark.parametrize(
    ("measured", "configured", "expected"),
    [
        ([], 13.0, 13.0),  # nothing measured: the configured start
        ([4.1, 4.9], 13.0, 13.0),  # faster: the configured start stays the floor
        ([30.0, 26.0, 28.0], 13.0, 28.0),  # image pulls: the median of the measured
        ([60.0] * 10 + [20.0, 20.0, 21.0, 22.0, 20.0], 13.0, 20.0),  # the last five only
    ],
)
def test_a_scale_out_is_priced_with_the_measured_start_where_slower(
    measured: list[float], configured: float, expected: float
) -> None:
    assert start_price(measured, configured) == expected


@given(
    st.lists(st.floats(0, 600, allow_nan=False), max_size=20),
    st.floats(0, 60, allow_nan=False),
)
def test_the_priced_start_is_never_below_the_configured_one(
    measured: list[float], configured: float
) -> None:
    priced = start_price(measured, configured)
    assert priced >= configured
    assert priced <= max([configured, *measured])
