"""A load that repeats, found from the input rates a policy has observed: its period and what
it predicts for the next minutes. Pure functions, no I/O.

The history is one input rate per decision (``step_s`` apart, oldest first), the rates the
controller measured itself: nothing is configured about the input. A period is the lag, in
steps, at which the history's autocorrelation peaks, when that peak is high
(:data:`MIN_CORRELATION`) and the history holds at least :data:`MIN_PERIODS` periods: a load
seen repeat twice. The forecast of a coming step is the highest of the rates one and two
periods before it at the same phase: an occurrence that was missed once (a sale that did not
happen) does not cancel the next, and noise is not averaged away into a smaller peak.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

MIN_CORRELATION = 0.4
"""Autocorrelation a lag needs to be the input's period (a sale every 400 s, one of three
missed, reaches 0.44; white noise over 130 steps stays within about ±0.17)."""
MIN_PROMINENCE = 0.3
"""How far the autocorrelation must dip between lag 0 and the period: a slow drift or a ramp
correlates with itself at every lag, falling steadily, with no dip before a peak."""
MIN_PERIODS = 3.0
"""Periods the history must hold before its period is trusted: two surges some minutes
apart are a coincidence as often as a rhythm (on the generated family, two spikes 208 s
apart read as a period with two), a third at the same interval much less often."""
MIN_PERIOD_S = 120.0
"""Shorter repeats are noise or batch rhythm, not a recurring load."""


def autocorrelations(values: Sequence[float], longest: int) -> list[float]:
    """The normalized autocorrelation of ``values`` at every lag from 0 to ``longest``
    (0 where it is undefined: a constant series, or a lag beyond it)."""
    n = len(values)
    series = np.asarray(values, dtype=float)
    centred = series - series.mean() if n else series
    variance = float(centred @ centred)
    out = [0.0] * (longest + 1)
    scale = float(series @ series) if n else 0.0
    if n == 0 or variance <= 1e-12 * scale:  # constant, up to rounding
        return out
    full = np.correlate(centred, centred, mode="full")[n - 1 :]
    for lag in range(min(longest, n - 1) + 1):
        out[lag] = float(full[lag]) / variance * n / (n - lag)
    return out


def find_period(history: Sequence[float], step_s: float) -> int | None:
    """The period of ``history`` in steps (None: no recurring load found): the lag of the
    highest local peak of the autocorrelation, at least :data:`MIN_PERIOD_S` long, reaching
    :data:`MIN_CORRELATION` after a dip of :data:`MIN_PROMINENCE`, with :data:`MIN_PERIODS`
    periods in the history."""
    if step_s <= 0:
        return None
    shortest = max(2, math.ceil(MIN_PERIOD_S / step_s))
    longest = int(len(history) / MIN_PERIODS)
    if longest <= shortest:
        return None
    correlations = autocorrelations(history, longest + 1)
    best: tuple[float, int] | None = None
    for lag in range(shortest, longest + 1):
        value = correlations[lag]
        if value < MIN_CORRELATION:
            continue
        peak = value >= correlations[lag - 1] and value >= correlations[lag + 1]
        dipped = min(correlations[1:lag]) <= value - MIN_PROMINENCE
        if peak and dipped and (best is None or value > best[0] + 1e-9):
            best = (value, lag)
    return None if best is None else best[1]


def forecast(history: Sequence[float], period: int, ahead: int) -> float:
    """The rate predicted ``ahead`` steps after the last one (``ahead`` ≥ 1): the highest of
    the rates one and two periods before that step (those within the history)."""
    n = len(history)
    seen = [
        history[index] for back in (period, 2 * period) if 0 <= (index := n - 1 + ahead - back) < n
    ]
    return max(seen, default=0.0)
