"""The period of a recurring load, its forecast, the recurring traces, and `rate` using them."""

from __future__ import annotations

import math
import random
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streamscale.autoscale import forecast, policy, recurring, simulator, traces

STEP = 10.0


def sine(period: int, n: int, noise: float = 0.0, seed: int = 0) -> list[float]:
    rng = random.Random(seed)
    return [1000 + 800 * math.sin(2 * math.pi * i / period) + rng.gauss(0, noise) for i in range(n)]


def noise(n: int, spread: float) -> list[float]:
    rng = random.Random(3)
    return [rng.gauss(0, spread) for _ in range(n)]


def sales(every: int, n: int, missed: int | None = None) -> list[float]:
    """A sale of 4 steps every ``every`` steps (the ``missed``-th not happening)."""
    out = []
    for i in range(n):
        k, phase = divmod(i, every)
        out.append(3000.0 if phase < 4 and k != missed else 1000.0)
    return out


@pytest.mark.parametrize(
    ("history", "expected"),
    [
        (sine(60, 200), 60),  # a 10 min cycle, 3.3 periods seen
        (sine(60, 200, noise=100, seed=1), 60),
        (sine(60, 150), None),  # fewer than three periods
        (sales(40, 130), 40),  # a sale every 400 s
        (sales(40, 130, missed=2), 40),  # one missed
        ([1000.0] * 200, None),  # constant: nothing repeats
        ([1000 + g for g in noise(200, 200.0)], None),  # noise only
        ([1000 + 10 * i for i in range(200)], None),  # a ramp: no dip, no period
    ],
)
def test_find_period(history: list[float], expected: int | None) -> None:
    found = forecast.find_period(history, STEP)
    if expected is None:
        assert found is None
    else:
        assert found is not None and abs(found - expected) <= 1


def test_forecast_takes_the_higher_of_two_periods_back() -> None:
    history = sales(40, 130, missed=2)  # the sale at 80-83 missed; next at 120 and 160
    assert forecast.forecast(history, 40, 1) == 1000.0  # step 130: 90 and 50 back, no sale
    # step 160 (31 ahead): 120 (a sale) and 80 (missed) back: the sale is predicted
    assert forecast.forecast(history, 40, 31) == 3000.0


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(0, 10_000), min_size=0, max_size=300), st.integers(1, 40))
def test_forecast_is_a_rate_seen(history: list[float], ahead: int) -> None:
    """Whatever the history, a period found is within its half and at least 2 min, and the
    forecast is a rate the history holds (or 0 before any)."""
    period = forecast.find_period(history, STEP)
    if period is not None:
        assert forecast.MIN_PERIOD_S / STEP <= period <= len(history) / forecast.MIN_PERIODS
        assert forecast.forecast(history, period, ahead) in [*history, 0.0]


def test_recurring_traces_are_seeded_and_bounded() -> None:
    for seed in recurring.RECURRING_SEEDS:
        trace = recurring.generate(seed)
        assert trace == recurring.generate(seed)
        assert trace.name == f"rec-{seed}"
        rates = trace.per_second()
        assert max(rates) <= 6000.0 and min(rates) >= 0.0
    kinds = {recurring.KINDS[s % 3] for s in recurring.RECURRING_SEEDS}
    assert kinds == {"cycle", "sales", "both"}
    missed = [
        s
        for s in recurring.RECURRING_SEEDS
        if (r := recurring.draw(s)).flash_sales
        and len(
            {b.start_s - a.start_s for a, b in zip(r.flash_sales, r.flash_sales[1:], strict=False)}
        )
        > 1
    ]
    assert missed  # at least one trace skips a sale


def test_rate_without_a_period_is_unchanged() -> None:
    """On a trace with no recurring load, the forecast changes nothing (the same decisions)."""
    trace = traces.step()
    scenario = simulator.GENERIC
    config = scenario.policy_config()
    off = simulator.simulate(trace, scenario.model, config)
    on = simulator.simulate(trace, scenario.model, replace(config, forecast=True))
    assert [(d.t, d.desired) for d in on.decisions] == [(d.t, d.desired) for d in off.decisions]


@pytest.mark.parametrize(
    ("peak", "steps_ahead", "expected"),
    [
        # 2 executors ride a sale of 3 000 for 40 s within the budget (20 s): none asked
        (3000.0, 1, 2),
        (5000.0, 3, 2),  # waiting a decision costs nothing yet
        # the last decision before the sale: the count its backlog needs (4), not the 6 its
        # peak rate would at the 0.9 target utilization
        (5000.0, 1, 4),
        # a larger sale: asked for earlier, since a later scale-up would need more
        (6000.0, 3, 4),
        (6000.0, 5, 2),
    ],
)
def test_rate_scales_up_ahead_of_a_predicted_sale(
    peak: float, steps_ahead: int, expected: int
) -> None:
    """A history of sales (4 steps of ``peak``, 1 000 records/s between) every 400 s, the next
    one ``steps_ahead`` decisions after this one: with the forecast, ``rate`` asks for the
    executors the sale's backlog needs to stay within the objective, at the last decision
    that can; without it, it holds."""

    def history(n: int) -> tuple[float, ...]:
        return tuple(peak if i % 40 < 4 else 1000.0 for i in range(n))

    config = replace(
        policy.PolicyConfig(min_executors=1, max_executors=8, target_utilization=0.9),
        forecast=True,
    )
    capacity = policy.Capacity(0.0, 1000.0, policy.CapacityMethod.FIT, 20, "test")
    batches = tuple(policy.BatchSample(1000, 0.5, 2, 990.0 + i) for i in range(10))
    obs = policy.Observation(
        now_s=1000.0,
        executors=2,
        partitions=8,
        partition_lag=(0,) * 8,
        input_rate=1000.0,
        recent_input_rate=1000.0,
        processed_rate=1000.0,
        batches=batches,
        metrics_age_s=1.0,
        time_lag_s=0.0,
    )
    # the decision appends this observation: the next sale starts at step 160
    state = policy.PolicyState(
        capacity=capacity, history=history(160 - steps_ahead), clear_since_s=0.0
    )
    ahead, _ = policy.decide(config, state, obs)
    plain, _ = policy.decide(replace(config, forecast=False), replace(state, history=()), obs)
    assert plain.desired == 2
    assert ahead.desired == expected
    if expected > 2:
        assert ahead.reason is policy.Reason.SCALE_UP_RATE
