"""Twins of a trace: the same input up to a second, and what rose before it lasting (issue 38).

Issue 38 asks that no peer beat `rate` on violation seconds, executor-seconds and reversals
together on more than 5 % of the seeds. Flink's autoscaler at its defaults does on 7-11 % of
them, by holding its count through a short rise that `rate` buys an executor for. Whether
holding was a safe choice cannot be known when it is made: a control tick sees the input of
the seconds before it only, so up to a tick the seed is identical to any input that shares its
seconds until then and differs after, in particular to one in which the rise goes on.

:func:`lasting` builds such a *twin* from a trace's per-second rates: the same seconds up to
``from_s``, then an input that never falls below the level the rise had reached (the mean of
the ``window_s`` seconds before ``from_s``, :func:`level_before`) for ``horizon_s`` seconds,
the trace's own rate where it is higher. A policy deciding at a tick ``t <= from_s`` sees the
same on the seed and on its twin, and acts alike on both.

:func:`buys` finds where `rate` bought what a peer did not: the runs of control ticks where
`rate`'s count exceeds the peer's, each starting with a scale-up of `rate`.
(``benchmarks/twin_limit.py`` runs the simulator on the twins; this module does no I/O.)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from streamscale.autoscale.traces import Trace
from streamscale.errors import ConfigError


def level_before(rates: Sequence[float], from_s: int, window_s: int) -> float:
    """The mean input of the ``window_s`` seconds before second ``from_s`` (fewer at the
    trace's start; 0 before its first second)."""
    if window_s < 1:
        raise ConfigError(f"a level is averaged over 1 s or more, not {window_s}")
    seen = rates[max(0, from_s - window_s) : max(0, from_s)]
    return sum(seen) / len(seen) if seen else 0.0


def lasting(rates: Sequence[float], from_s: int, level: float, horizon_s: int) -> tuple[float, ...]:
    """``rates`` up to second ``from_s`` (excluded) unchanged, then for ``horizon_s`` seconds
    at least ``level`` (the rate itself where higher); the twin ends there, or where
    ``rates`` does."""
    if from_s < 0 or horizon_s < 0:
        raise ConfigError(
            f"a twin starts at 0 s or later and lasts 0 s or more ({from_s}, {horizon_s})"
        )
    end = min(len(rates), from_s + horizon_s)
    head = tuple(rates[: min(from_s, end)])
    return head + tuple(max(level, x) for x in rates[len(head) : end])


def twin_trace(trace: Trace, from_s: int, window_s: int, horizon_s: int) -> tuple[Trace, float]:
    """The twin of ``trace`` from second ``from_s`` (:func:`lasting` at
    :func:`level_before`), as a trace, and the level it holds."""
    rates = trace.per_second()
    level = level_before(rates, from_s, window_s)
    twin = lasting(rates, from_s, level, horizon_s)
    points = tuple((float(t), x) for t, x in enumerate(twin))
    return Trace(f"{trace.name}-twin-{from_s}", points, len(twin)), level


@dataclass(frozen=True)
class Buy:
    """A run of control ticks where `rate` asked for more executors than a peer."""

    first_tick: int
    """Index of the run's first tick (``first_tick × interval`` is its second)."""
    last_tick: int
    """Index of its last tick (inclusive)."""
    held: int
    """The peer's count at the run's first tick."""
    most: int
    """`rate`'s highest count in the run."""


def buys(rate: Sequence[int], peer: Sequence[int]) -> list[Buy]:
    """The runs of ticks (one count per control tick, both from the same initial count) in
    which ``rate`` exceeds ``peer`` and which begin with a scale-up of ``rate``: a bet on a
    rise that the peer did not make. A run that begins with the peer scaling down below
    `rate`'s count is not one."""
    if len(rate) != len(peer):
        raise ConfigError(f"one count per tick for both ({len(rate)} against {len(peer)})")
    found: list[Buy] = []
    k = 0
    while k < len(rate):
        if rate[k] <= peer[k]:
            k += 1
            continue
        start = k
        while k < len(rate) and rate[k] > peer[k]:
            k += 1
        if start > 0 and rate[start] > rate[start - 1]:
            found.append(Buy(start, k - 1, peer[start], max(rate[start:k])))
    return found
