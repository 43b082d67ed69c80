"""The cluster model, the figures, determinism and the oracle."""

from __future__ import annotations

from dataclasses import replace

import pytest

from streamscale.autoscale import policy, simulator
from streamscale.autoscale.traces import Trace, step

MODEL = simulator.ClusterModel()
RATE = policy.PolicyConfig(min_executors=1, max_executors=8, scale_up_delay_s=13, restart_pause_s=5)
EXACT = replace(MODEL, rate_jitter=0.0)


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


def test_seed_changes_the_jitter_only() -> None:
    trace = flat(2000, 120)
    a = simulator.simulate(trace, MODEL, simulator.Fixed(1))
    b = simulator.simulate(trace, replace(MODEL, seed=1), simulator.Fixed(1))
    assert a.processed != b.processed
    assert a.input_rate == b.input_rate


def test_fifo_time_lag() -> None:
    # 2000 rec/s into one 1000 rec/s executor: after 10 s, the records of the first 5 s are done
    result = simulator.simulate(flat(2000, 10), EXACT, simulator.Fixed(1))
    assert result.lag[-1] == pytest.approx(10_000)
    assert result.time_lag_s[-1] == pytest.approx(5.0)
    assert result.summary.max_time_lag_s == pytest.approx(5.0)
    assert result.summary.drain_time_s == 0  # never above the 5 s caught-up threshold


def test_partition_cap() -> None:
    model = replace(EXACT, partitions=2)
    result = simulator.simulate(flat(5000, 20), model, simulator.Fixed(6))
    assert max(result.processed) == pytest.approx(2000)  # 2 tasks, 4 executors idle
    assert result.summary.executor_seconds == 6 * 20  # but all of them are billed


def test_fixed_never_acts() -> None:
    result = simulator.simulate(step(), MODEL, simulator.Fixed(2))
    assert set(result.requested) == {2}
    assert result.summary.actions == 0


def test_start_delay_and_rescale_pause() -> None:
    # plan: 1 executor, then 2 from t=10; the second runs at 10 + 13, then 5 s of pause
    model = replace(EXACT, control_interval_s=10, start_delay_s=13, rescale_pause_s=5)
    result = simulator.simulate(flat(500, 60), model, simulator.Plan((1, 2, 2, 2, 2, 2)))
    assert result.running[22] == 1
    assert result.running[23] == 2
    assert result.processed[23:28] == (0.0,) * 5
    assert result.processed[28] > 0
    # billed: 1 × 60 s plus the second from its request (t=10) on
    assert result.summary.executor_seconds == 60 + 50
    assert result.summary.actions == 1


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
    summary = simulator.simulate(step(), MODEL, RATE).summary
    assert summary.reversals == 0
    assert summary.actions <= 4  # two step changes, at most two decisions each
    assert summary.max_time_lag_s < 30


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
    assert simulator.comparison_names(RATE) == ("rate", "lag", "fixed:1", "fixed:8", "oracle")


def test_model_validation() -> None:
    with pytest.raises(ValueError, match="rate_jitter"):
        simulator.ClusterModel(rate_jitter=1.5)
