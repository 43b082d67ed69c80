"""The generated trace family (issue 23): determinism, each shape alone, rates within bounds,
and ``rate`` scored against the oracle on a few short generated traces."""

from __future__ import annotations

import dataclasses
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streamscale.autoscale import family, policy, simulator


def test_same_seed_same_trace() -> None:
    assert family.generate(7) == family.generate(7)
    assert family.draw(7) == family.draw(7)
    assert family.generate(7) != family.generate(8)


def test_tuning_and_evaluation_seeds_are_apart() -> None:
    assert not set(family.TUNING_SEEDS) & set(family.EVALUATION_SEEDS)
    assert len(family.EVALUATION_SEEDS) >= 100


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 10**6))
def test_rates_are_finite_non_negative_and_bounded(seed: int) -> None:
    trace = family.generate(seed, duration_s=600)
    rates = trace.per_second()
    assert len(rates) == trace.duration_s == 600
    assert all(math.isfinite(x) and 0 <= x <= family.MAX_RATE for x in rates)


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 10**6))
def test_drawn_events_fit_the_trace(seed: int) -> None:
    recipe = family.draw(seed)
    assert 1200 <= recipe.duration_s <= 1800
    assert 600 <= recipe.base <= 4000
    starts = [e.start_s for e in (*recipe.ramps, *recipe.flash_sales, *recipe.spikes)]
    starts += [o.start_s for o in recipe.outages]
    assert all(60 <= s < recipe.duration_s - 240 for s in starts)
    assert recipe.describe().startswith(f"seed {seed}, {recipe.duration_s} s: base ")


@pytest.mark.parametrize(
    ("offsets", "expected"),
    [
        (family.ramp_offsets(family.Ramp(2, 4, 100.0), 8), (0, 0, 0, 25, 50, 75, 100, 100)),
        (family.spike_offsets(family.Spike(1, 2, 50.0), 5), (0, 50, 50, 0, 0)),
        (family.flash_sale_offsets(family.FlashSale(1, 100.0, 1.0), 3), (0, 100, 100 / math.e)),
    ],
)
def test_additive_shapes(offsets: tuple[float, ...], expected: tuple[float, ...]) -> None:
    assert offsets == pytest.approx(expected)


def test_cycle_swings_around_one() -> None:
    factors = family.cycle_factors(family.Cycle(period_s=100, amplitude=0.5, phase=0.0), 100)
    assert factors[0] == pytest.approx(1.0)
    assert max(factors) == pytest.approx(1.5)
    assert min(factors) == pytest.approx(0.5)
    assert sum(factors) / len(factors) == pytest.approx(1.0)


def test_noise_has_the_spread_drawn() -> None:
    factors = family.noise_factors(family.Noise(0.1, 0.0, 30.0, seed=1), 20_000)
    mean = sum(factors) / len(factors)
    spread = math.sqrt(sum((f - mean) ** 2 for f in factors) / len(factors))
    assert mean == pytest.approx(1.0, abs=0.01)
    assert spread == pytest.approx(0.1, abs=0.01)
    assert family.noise_factors(family.Noise(0.0, 0.0, 30.0, seed=1), 3) == (1.0, 1.0, 1.0)


@pytest.mark.parametrize(
    ("outage", "expected"),
    [
        # 2 s of 10 rec/s lost, all held, released at 5 rec/s more on top of the input
        (family.Outage(1, 2, 1.0, 5.0), (10, 0, 0, 15, 15, 15, 15, 10)),
        # dropped at the source: nothing comes back
        (family.Outage(1, 2, 0.0, 5.0), (10, 0, 0, 10, 10, 10, 10, 10)),
    ],
)
def test_outage(outage: family.Outage, expected: tuple[float, ...]) -> None:
    assert family.apply_outage(outage, [10.0] * 8) == pytest.approx(expected)


def test_outage_release_stays_under_the_ceiling() -> None:
    out = family.apply_outage(family.Outage(0, 2, 1.0, 100.0), [10.0] * 8, ceiling=12.0)
    assert out == pytest.approx((0, 0, 12, 12, 12, 12, 12, 12))  # 12 of 20 held are back


GUARD_SEEDS = (5000, 5001, 5002, 5003)
"""Seeds outside the tuning and evaluation sets, with 600 s traces."""


@pytest.mark.parametrize("seed", GUARD_SEEDS)
def test_rate_on_short_generated_traces(seed: int) -> None:
    """0 reversals, and no SLO violation where the oracle has none (issue 23's done-when,
    on a few short traces: the full family runs in ``benchmarks/autoscaler_family.py``)."""
    score = simulator.score_seed(seed, duration_s=600)
    assert score.rate.reversals == 0, score.description
    assert not score.violates_beyond_oracle("rate"), score.description
    assert score.ratio("rate") < 1.5, score.description


@pytest.mark.parametrize(
    ("name", "seed"),
    [("gen-41", 41), ("gen-0", 0), ("gen-", None), ("gen-4a", None), ("step", None)],
)
def test_seed_of_a_generated_trace_name(name: str, seed: int | None) -> None:
    assert family.seed_of(name) == seed
    if seed is not None:
        assert family.generate(seed).name == name


def test_a_known_oracle_is_not_searched_again() -> None:
    """The oracle's figures, when given, are the score's (they do not depend on the
    policies); ``rate`` and ``lag`` still run."""
    known = simulator.Summary(0, 1, 2.0, 3.0, 1000.0, 4, 5)
    score = simulator.score_seed(GUARD_SEEDS[0], duration_s=300, oracle_summary=known)
    assert score.oracle is known
    assert score.rate.executor_seconds > 0
    assert score.ratio("rate") == score.rate.executor_seconds / 1000.0


def test_reverse_for_slo_meets_a_spike_after_a_scale_in() -> None:
    """Tuning seed 41: ``rate`` scales in 3 → 2 at 370 s, seven seconds before a spike of
    2 560 records/s (19 s). By default it waits out the window: 26 s beyond the objective,
    no reversal. With ``reverse_for_slo`` the scale-up follows at once: a reversal, and the
    objective kept."""
    trace = family.generate(41)
    model = dataclasses.replace(simulator.GENERIC.model, seed=41)
    figures = {}
    for reverse in (False, True):
        base = policy.PolicyConfig(reverse_for_slo=reverse)
        config = simulator.GENERIC.policy_config(base)
        strategy = simulator.resolve("rate", config, trace, model)
        figures[reverse] = simulator.simulate(trace, model, strategy).summary
    assert (figures[False].slo_violation_s, figures[False].reversals) == (26, 0)
    assert figures[True].slo_violation_s == 0
    assert figures[True].reversals >= 1
