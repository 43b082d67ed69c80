"""Generated traces of a load that repeats: daily cycles, sales at fixed intervals, both; with
noise, and on some a sale that does not happen (issue 38).

Each draw is a :class:`~streamscale.autoscale.family.Recipe` of the family's shapes (a
:class:`~streamscale.autoscale.family.Cycle`, :class:`~streamscale.autoscale.family.FlashSale`
at a fixed interval, :class:`~streamscale.autoscale.family.Noise`) rendered by
:func:`~streamscale.autoscale.family.render`, long enough (five cycles, six sales) for a
policy to see the load repeat twice and then use it. Seeds :data:`RECURRING_SEEDS`; the same
seed always gives the same trace, named ``rec-N``.
"""

from __future__ import annotations

import math
import random
from dataclasses import replace

from streamscale.autoscale import family
from streamscale.autoscale.traces import Trace

RECURRING_SEEDS = range(4000, 4012)
"""The recurring traces scored by ``benchmarks/recurring.py`` (drawn once, never tuned on)."""

KINDS = ("cycle", "sales", "both")


def draw(seed: int) -> family.Recipe:
    """The recipe of ``seed``: a daily cycle (``seed % 3 == 0``), sales every 5-10 min
    (``1``) or both (``2``); some of the sales traces skip one occurrence after the third."""
    rng = random.Random(f"recurring-{seed}")
    kind = KINDS[seed % 3]
    noise = family.Noise(
        white_cv=rng.uniform(0.02, 0.08),
        slow_cv=rng.uniform(0.0, 0.05),
        slow_tau_s=rng.uniform(20.0, 60.0),
        seed=rng.randrange(2**31),
    )
    base = rng.uniform(1200.0, 2500.0)
    cycle = None
    period = 0
    if kind in ("cycle", "both"):
        period = rng.randrange(600, 901, 60)
        cycle = family.Cycle(period, rng.uniform(0.3, 0.6), rng.uniform(0.0, 2 * math.pi))
    every = rng.randrange(300, 601, 60) if kind in ("sales", "both") else 0
    duration = max(5 * period, 6 * every)
    sales: tuple[family.FlashSale, ...] = ()
    if every:
        first = rng.randrange(60, every)
        peak = rng.uniform(1500.0, 3500.0)
        decay = rng.uniform(40.0, 120.0)
        times = list(range(first, duration - 120, every))
        if len(times) > 4 and rng.random() < 0.6:
            times.remove(rng.choice(times[3:]))
        sales = tuple(family.FlashSale(t, peak, decay) for t in times)
    return family.Recipe(seed, duration, base, noise, cycle, flash_sales=sales)


def generate(seed: int) -> Trace:
    """The trace of ``seed`` (:func:`draw`, rendered as the family's)."""
    return replace(family.render(draw(seed)), name=f"rec-{seed}")
