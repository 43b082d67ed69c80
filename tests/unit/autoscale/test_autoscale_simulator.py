"""The micro-batch cluster model, the figures, determinism, calibration and the oracle."""

from __future__ import annotations

import itertools
import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from streamscale.autoscale import peers, policy, simulator
from streamscale.autoscale.capacity import CapacityMethod
from streamscale.autoscale.traces import Trace, demo, step
from streamscale.errors import ConfigError

MODEL = simulator.GENERIC.model
RATE = simulator.GENERIC.policy_config()
EXACT = replace(MODEL, rate_jitter=0.0)
# No fixed cost, batches back to back: throughput as a per-second model would have it.
FLUID = replace(EXACT, fixed_cost_s=0.0, trigger_interval_s=0.0, max_records_per_trigger=None)


def flat(rate: float, seconds: int, then: float | None = None, at: int = 0) -> Trace:
    points: tuple[tuple[float, float], ...] = ((0, rate),)
    if then is not None:
        points += ((at, then),)
    return Trace("t", points, seconds)


def test_same_inputs_same_output() -> None:
    trace = step()
    for strategy in (RATE, replace(RATE, kind=policy.PolicyKind.LAG), simulator.Fixed(3)):
        first = simulator.simulate(trace, MODEL, strategy)
        second = simulator.simulate(trace, MODEL, strategy)
        assert first == second
        assert first.summary == second.summary


def test_oracle_is_deterministic() -> None:
    trace = flat(1000, 300, then=3000, at=100)
    assert simulator.oracle(trace, MODEL, 1, 4) == simulator.oracle(trace, MODEL, 1, 4)


def test_fifo_time_lag() -> None:
    # 2000 rec/s into one 1000 rec/s executor: the records of a running batch still count
    # as lag (committed when it ends), and the time lag is the age of the oldest of them
    result = simulator.simulate(flat(2000, 20), FLUID, simulator.Fixed(1))
    for t in (9, 14, 19):
        done = sum(result.processed[: t + 1])
        assert result.lag[t] == pytest.approx(2000 * (t + 1) - done)
        # the oldest whole record arrived when its last part did
        assert result.time_lag_s[t] == pytest.approx(t + 1 - (done + 1) / 2000)
    assert sum(result.processed) <= 1000 * 20
    assert result.summary.slo_violation_s == 0


def test_a_batch_pays_its_fixed_cost_at_every_trigger() -> None:
    # 500 rec/s, one executor of 1000 rec/s, 0.2 s per batch, a 1 s trigger: one batch a
    # second of ~500 records taking 0.2 + 0.5 s, the executor idle 30 % of the time
    model = replace(EXACT, fixed_cost_s=0.2, trigger_interval_s=1.0)
    result = simulator.simulate(flat(500, 30), model, simulator.Fixed(1))
    steady = result.batches[2:]
    assert len(steady) >= 25
    for batch in steady:
        assert batch.records == pytest.approx(500, abs=2)
        assert batch.busy_s == pytest.approx(0.2 + batch.records / 1000)
        assert batch.executors == 1
    starts = [b.started_s for b in steady if b.started_s is not None]
    assert all(b - a == pytest.approx(1.0) for a, b in itertools.pairwise(starts))
    assert max(result.time_lag_s[5:]) < 2.0


def test_the_fixed_cost_limits_what_small_batches_carry() -> None:
    # 900 rec/s on one executor of 1000 rec/s with a 0.5 s fixed cost: batches grow until the
    # cost amortizes (cycle c / (1 − 0.9) = 5 s); with the 1 s trigger and a 1000-record
    # limit, a batch carries 1000 records in 1.5 s: 667 rec/s, the lag grows.
    unlimited = simulator.simulate(flat(900, 120), EXACT, simulator.Fixed(1))
    assert max(unlimited.time_lag_s[60:]) < 15
    assert unlimited.batches[-1].records > 2000
    limited = replace(EXACT, max_records_per_trigger=1000)
    capped = simulator.simulate(flat(900, 120), limited, simulator.Fixed(1))
    assert {b.records for b in capped.batches[10:]} == {1000}
    assert capped.lag[-1] > 20_000


def test_seed_changes_the_jitter_only() -> None:
    trace = flat(2000, 120)
    a = simulator.simulate(trace, MODEL, simulator.Fixed(1))
    b = simulator.simulate(trace, replace(MODEL, seed=1), simulator.Fixed(1))
    assert a.batches != b.batches
    assert a.input_rate == b.input_rate


def test_partition_cap() -> None:
    model = replace(FLUID, partitions=2)
    result = simulator.simulate(flat(5000, 20), model, simulator.Fixed(6))
    assert {b.executors for b in result.batches} == {2}  # 2 tasks, 4 executors idle
    assert sum(result.processed) <= 2000 * 20
    assert result.summary.executor_seconds == 6 * 20  # but all of them are billed


def test_fixed_never_acts() -> None:
    result = simulator.simulate(step(), MODEL, simulator.Fixed(2))
    assert set(result.requested) == {2}
    assert result.summary.actions == 0


def test_start_delay_rescale_pause_and_warm_up() -> None:
    # plan: 1 executor, then 2 from t=10; the second runs at 10 + 13, then no batch starts
    # for 5 s, and the first batch after it pays 2 s of warm-up
    model = replace(EXACT, control_interval_s=10, start_delay_s=13, rescale_pause_s=5)
    result = simulator.simulate(flat(500, 60), model, simulator.Plan((1, 2, 2, 2, 2, 2)))
    assert result.running[22] == 1
    assert result.running[23] == 2
    starts = [b.started_s or 0.0 for b in result.batches]
    assert not [t for t in starts if 23 <= t < 28]
    first = next(b for b in result.batches if (b.started_s or 0) >= 28)
    assert first.executors == 2
    assert first.busy_s == pytest.approx(model.fixed_cost_s + first.records / 2000 + 2.0)
    # billed: 1 × 60 s plus the second from its request (t=10) on
    assert result.summary.executor_seconds == 60 + 50
    assert result.summary.actions == 1


@pytest.mark.parametrize(
    ("plan", "ticks", "late"),
    [
        ((1, 2, 3, 1), 1, (1, 1, 2, 3)),
        ((1, 2, 3, 1), 2, (1, 1, 1, 2)),
        ((1, 2, 3, 1), 0, (1, 2, 3, 1)),
        ((4, 2), 5, (4, 4)),
        ((), 1, ()),
    ],
)
def test_a_delayed_plan_makes_each_change_later(
    plan: tuple[int, ...], ticks: int, late: tuple[int, ...]
) -> None:
    assert simulator.Plan(plan).delayed(ticks).executors == late


def test_a_plan_is_not_delayed_into_the_past() -> None:
    with pytest.raises(ConfigError, match="0 ticks or more"):
        simulator.Plan((1, 2)).delayed(-1)


def test_the_oracle_one_decision_late_loses_its_foresight() -> None:
    # 79 % of one executor, then a step to 2.5 times that: the oracle adds the second
    # executor at the decision before the step; one decision late, the step comes first
    trace = flat(790, 400, then=1960, at=151)
    plan = simulator.oracle(trace, EXACT, 1, 8)
    on_time = simulator.simulate(trace, EXACT, plan).summary
    late = simulator.simulate(trace, EXACT, plan.delayed()).summary
    assert on_time.slo_violation_s == 0
    assert late.slo_violation_s > 0


def test_the_observation_sizes_a_step_from_the_latest_window(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # a step from 1 000 to 3 000 records/s at 95 s: the decision at 100 s sees it whole
    seen: dict[float, policy.Observation] = {}
    decide = policy.decide

    def record(
        config: policy.PolicyConfig, state: policy.PolicyState, obs: policy.Observation
    ) -> tuple[policy.Decision, policy.PolicyState]:
        seen[obs.now_s] = obs
        return decide(config, state, obs)

    monkeypatch.setattr(policy, "decide", record)
    simulator.simulate(flat(1000, 120, then=3000, at=95), EXACT, RATE)
    assert seen[90.0].recent_input_rate == pytest.approx(1000)
    assert seen[100.0].recent_input_rate == pytest.approx(3000)  # the 10 s average: 2 000
    assert seen[100.0].input_rate < 2000


def test_a_kill_delays_the_running_batch() -> None:
    model = replace(EXACT, rescale_pause_s=5, stop_delay_s=0)
    trace = flat(3000, 40)
    kept = simulator.simulate(trace, model, simulator.Plan((3, 3, 3, 3)))
    killed = simulator.simulate(trace, model, simulator.Plan((3, 2, 2, 2)))
    assert killed.summary.executor_seconds < kept.summary.executor_seconds
    assert max(killed.time_lag_s[10:]) > max(kept.time_lag_s[10:]) + 4


def test_reversals_count_opposite_actions_inside_the_window() -> None:
    model = replace(EXACT, reversal_window_s=60)
    quick = simulator.simulate(
        flat(500, 100), model, simulator.Plan((1, 2, 1, 1, 1, 1, 1, 1, 2, 2))
    )
    assert quick.summary.actions == 3
    assert quick.summary.reversals == 1  # up at 10, down at 20; up again at 80 is 60 s later
    slow = simulator.simulate(flat(500, 100), model, simulator.Plan((1, 2, 2, 2, 2, 2, 2, 2, 1, 1)))
    assert slow.summary.reversals == 0


def test_metrics_outage_holds() -> None:
    # the load drops at 100 s, but metrics are out from 100 to 400 s: no scale-down then
    model = replace(MODEL, metrics_outages=((100, 400),))
    result = simulator.simulate(flat(5000, 600, then=500, at=100), model, RATE)
    during = [d for d in result.decisions if 100 <= d.t < 400]
    assert {d.reason for d in during} == {policy.Reason.HOLD_MISSING_METRICS.value}
    assert all(d.desired == d.current for d in during)
    after = [d for d in result.decisions if d.t >= 400 and d.desired < d.current]
    assert after and after[0].t >= 460  # a full window of fresh metrics first


def test_rate_policy_on_the_step_trace() -> None:
    result = simulator.simulate(step(), MODEL, RATE)
    summary = result.summary
    assert summary.reversals == 0
    assert summary.actions <= 2 * 2 + 1  # two step changes
    assert summary.slo_violation_s == 0
    # it sized with the capacity fitted on the simulated batches, not the model's own
    fitted = [d for d in result.decisions if d.executor_rate is not None and d.t > 200]
    assert fitted
    assert all(d.executor_rate == pytest.approx(1000, rel=0.1) for d in fitted)
    # (while it rides 5 executors at the batch limit, the batches are all of one size and the
    # fit trades fixed cost for rate: 0.69 s and 1 053/s, within the figures above)
    assert all(d.fixed_cost_s == pytest.approx(0.5, abs=0.2) for d in fitted)


@pytest.mark.parametrize("rate", [1900.0, 4500.0, 6100.0])
def test_a_steady_input_just_above_a_count_rides_its_budget_once(rate: float) -> None:
    """An hour at an input the smaller of two counts carries to within 5 %: the budget is
    spent on the smaller count until a scale-up is due, then the count is remembered as
    outgrown — at most two actions, no reversal, no SLO violation, fewer executor-seconds than
    the larger count throughout."""
    result = simulator.simulate(flat(rate, 3600), MODEL, RATE)
    summary = result.summary
    assert summary.actions <= 2
    assert summary.reversals == 0
    assert summary.slo_violation_s == 0
    assert summary.executor_seconds < 3600 * max(d.desired for d in result.decisions)


def test_demo_profile_a_burst_one_executor_cannot_absorb() -> None:
    """Three times the default burst: the drain at one executor would pass the 30 s bound,
    so one scale-out while the lag is there, one scale-in once it is gone, no reversal."""
    scenario = simulator.DEMO
    trace = demo(burst_frames=200_000)
    result = simulator.simulate(trace, scenario.model, scenario.policy_config())
    actions = [d for d in result.decisions if d.desired != d.current]
    assert [(d.current, d.desired) for d in actions] == [(1, 2), (2, 1)]
    up, down = actions
    burst_at = 36
    assert up.t - burst_at <= 2 * scenario.model.control_interval_s + 5  # after warm-up batches
    assert result.lag[up.t] > 0
    assert result.time_lag_s[down.t] <= scenario.model.caught_up_s
    assert result.summary.reversals == 0


def test_calibration_recovers_the_model_from_its_batches() -> None:
    """A decision log written from a simulated run gives back the model's fixed cost and
    rate, the control interval and the scale-up delay."""
    scenario = simulator.DEMO
    model = replace(scenario.model, executor_rate=20_000.0, fixed_cost_s=0.7)
    trace = demo(burst_frames=200_000)
    result = simulator.simulate(trace, model, scenario.policy_config())
    records = [
        {
            "time": float(d.t),
            "running": result.running[d.t - 1],
            "desired": d.desired,
            "direction": "up" if d.desired > d.current else "none",
            "outcome": "applied" if d.desired != d.current else "held",
            "batches": [
                [i, b.started_s, b.busy_s, b.records, b.executors]
                for i, b in enumerate(result.batches)
                if b.started_s is not None and d.t - 5 <= b.started_s + b.busy_s < d.t
            ],
        }
        for d in result.decisions
    ]
    calibration = simulator.calibrate(records)
    assert calibration.capacity.method is CapacityMethod.FIT
    assert calibration.capacity.rate == pytest.approx(20_000, rel=0.1)
    assert calibration.capacity.fixed_cost_s == pytest.approx(0.7, rel=0.1)
    assert calibration.control_interval_s == 5.0
    assert calibration.start_delay_s is not None
    assert abs(calibration.start_delay_s - model.start_delay_s) <= 5
    calibrated = calibration.apply(scenario.model)
    assert calibrated.fixed_cost_s == calibration.capacity.fixed_cost_s
    assert calibrated.control_interval_s == 5


def test_calibration_never_invents_a_capacity() -> None:
    steady = [{"time": float(t), "batches": [[t, float(t), 1.1, 1600, 1]]} for t in range(30)]
    calibration = simulator.calibrate(steady)
    assert not calibration.capacity.known
    with pytest.raises(ValueError, match="does not measure the capacity"):
        calibration.apply(MODEL)
    with pytest.raises(ValueError, match="not a decision log record"):
        simulator.calibrate([{"time": 1.0, "batches": [[1, 2]]}])


def test_oracle_meets_the_target_and_beats_fixed_max() -> None:
    trace = flat(1000, 600, then=3500, at=200)
    model = replace(MODEL, target_time_lag_s=10)
    plan = simulator.oracle(trace, model, 1, 6)
    result = simulator.simulate(trace, model, plan)
    assert result.summary.max_time_lag_s <= 10 + 1e-6
    assert result.time_lag_s[-1] <= model.caught_up_s
    fixed = simulator.simulate(trace, model, simulator.Fixed(6)).summary
    assert result.summary.executor_seconds < fixed.executor_seconds
    assert all(1 <= n <= 6 for n in plan.executors)


def test_oracle_falls_back_to_max_where_the_target_is_out_of_reach() -> None:
    # 5000 rec/s for 60 s with at most 2 executors: nothing keeps the time lag under 10 s
    trace = Trace("burst", ((0, 1000.0), (100, 5000.0), (160, 500.0)), 400)
    model = replace(MODEL, target_time_lag_s=10)
    plan = simulator.oracle(trace, model, 1, 2)
    best = simulator.simulate(trace, model, simulator.Fixed(2)).summary
    result = simulator.simulate(trace, model, plan).summary
    assert result.max_time_lag_s <= best.max_time_lag_s + 1e-6


def test_resolve() -> None:
    trace = flat(1000, 100)
    assert simulator.resolve("fixed:3", RATE, trace, MODEL) == simulator.Fixed(3)
    lag = simulator.resolve("lag", RATE, trace, MODEL)
    assert isinstance(lag, policy.PolicyConfig) and lag.kind is policy.PolicyKind.LAG
    assert isinstance(simulator.resolve("oracle", RATE, trace, MODEL), simulator.Plan)
    for bad in ("fixed:x", "fixed:0", "hpa"):
        with pytest.raises(ValueError, match=bad):
            simulator.resolve(bad, RATE, trace, MODEL)
    assert simulator.comparison_names(RATE) == (
        "rate",
        "lag",
        *peers.PEER_NAMES,
        "fixed:1",
        "fixed:8",
        "oracle",
    )
    assert isinstance(simulator.resolve("flink", RATE, trace, MODEL), peers.Peer)


def test_model_validation() -> None:
    with pytest.raises(ValueError, match="rate_jitter"):
        simulator.ClusterModel(rate_jitter=1.5)


REAL_LOG = Path(__file__).with_name("demo_decisions.jsonl")
"""The decision log of a real ``streamscale demo`` run with its defaults (2-core machine,
2026-11-24, Spark's connector): one scale-out at 25.5 s (lag 233 389), one scale-in at
122.0 s, 30 s after the lag was back to 0; max lag 798 465 records, max time lag 58.6 s."""


def _real_log() -> list[dict[str, Any]]:
    return [json.loads(line) for line in REAL_LOG.read_text().splitlines()]


def test_a_real_demo_log_calibrates_the_demo_scenario() -> None:
    calibration = simulator.calibrate(_real_log())
    assert calibration.batches == 71
    assert calibration.capacity.method is CapacityMethod.FIT
    # the demo scenario carries these figures
    assert calibration.capacity.fixed_cost_s == pytest.approx(
        simulator.DEMO.model.fixed_cost_s, rel=0.05
    )
    assert calibration.capacity.rate == pytest.approx(simulator.DEMO.model.executor_rate, rel=0.05)
    assert calibration.control_interval_s == pytest.approx(5.0, abs=0.1)
    assert calibration.start_delay_s == pytest.approx(simulator.DEMO.model.start_delay_s, abs=1)


def test_a_real_demo_run_replayed_takes_the_same_actions_within_one_interval() -> None:
    replayed = simulator.replay(_real_log(), simulator.DEMO)
    assert [(a.current, a.desired) for a in replayed.real] == [(1, 2), (2, 1)]
    assert [(a.current, a.desired) for a in replayed.actions] == [(1, 2), (2, 1)]
    assert replayed.matches()  # within the 5 s control interval
    assert not replayed.matches(tolerance_s=0.1)  # not by construction
    real_max = max(r["max_time_lag_s"] or 0.0 for r in _real_log())
    assert replayed.simulated.summary.max_time_lag_s == pytest.approx(real_max, rel=0.2)


def test_the_demo_profile_scales_out_on_the_burst_and_in_after_it() -> None:
    result = simulator.simulate(demo(), simulator.DEMO.model, simulator.DEMO.policy_config())
    actions = [(d.t, d.current, d.desired) for d in result.decisions if d.desired != d.current]
    assert [(c, d) for _, c, d in actions] == [(1, 2), (2, 1)]
    assert 36 <= actions[0][0] <= 36 + 2 * simulator.DEMO.model.control_interval_s


def test_rate_decisions_carry_the_reload_they_priced() -> None:
    # a stateful query: 0 priced before any change, then the whole state's reload as the
    # first change measured it (scaled by the state's growth); plans and fixed counts price none
    model = replace(
        EXACT, state_bytes_per_record=250.0, state_max_bytes=2e9, reload_bytes_per_s=25e6
    )
    result = simulator.simulate(flat(800, 300, then=4000, at=60), model, RATE)
    changes = [d for d in result.decisions if d.desired != d.current]
    assert changes
    first = changes[0]
    assert all(d.reload_s == 0.0 for d in result.decisions if d.t <= first.t)
    after = [d.reload_s for d in result.decisions if d.t > first.t + model.start_delay_s + 10]
    assert after and all(r is not None and r > 0 for r in after)
    planned = simulator.simulate(flat(800, 60), model, simulator.Plan((1, 2, 2, 2, 2, 2)))
    assert {d.reload_s for d in planned.decisions} == {None}
