"""What the rescue of a violating run does that the run did not (issue 38).

``benchmarks/information_limit.py`` finds, for a run that breaks the time-lag objective, the
latest control tick at which switching from the run's count to some count, held to the end,
still keeps the objective (the *latest rescue*), and the counts that do. :func:`compare`
says how that rescue differs from what the run did from that tick on, one of
:class:`Kind`:

- ``hold``: keeping the count the run had is a rescue, and the run's next change was a
  scale-up (a top-up whose start and pause cost more than it saved);
- ``no scale-down``: keeping it is a rescue, and the run's next change was a scale-down;
- ``sooner``: the run held at the rescue's tick and reached a rescuing count ticks later;
- ``more``: the run asked fewer than every rescuing count at the rescue's tick, or never
  reached one before its first violation;
- ``fewer``: the run stepped past the rescuing counts at the rescue's tick (a larger change,
  whose start and pause, the state it moves included, cost more than it saved);
- ``changed again``: the run switched to a rescuing count at the rescue's tick, then left it.

Pure: counts in, a :class:`Difference` out (the simulator's runs are the benchmark's).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

from streamscale.errors import ConfigError


class Kind(StrEnum):
    """How a rescue differs from the run it rescues."""

    HOLD = "hold"
    NO_SCALE_DOWN = "no scale-down"
    SOONER = "sooner"
    MORE = "more"
    FEWER = "fewer"
    CHANGED_AGAIN = "changed again"


@dataclass(frozen=True)
class Difference:
    """The rescue at tick ``tick`` against the run's counts."""

    kind: Kind
    tick: int
    """Index of the latest rescue's tick."""
    was: int
    """The run's count before that tick (the one in force)."""
    least: int
    """The smallest rescuing count."""
    asked: int
    """The run's count at that tick."""
    change_tick: int | None
    """``hold`` and ``no scale-down``: the run's next change from ``tick`` on; ``sooner``:
    the first tick at which the run reached ``least``; otherwise None."""


def compare(
    counts: Sequence[int], tick: int, rescues: Sequence[int], first_violation_tick: int
) -> Difference:
    """How the rescue switching to any of ``rescues`` at tick index ``tick`` differs from the
    run that asked ``counts`` (one a tick) and first broke the objective at tick index
    ``first_violation_tick`` (the tick at or before its first violating second)."""
    if not rescues:
        raise ConfigError("no rescuing count to compare with")
    if not 0 < tick < len(counts) or not tick <= first_violation_tick < len(counts):
        raise ConfigError(
            f"ticks out of order or range: rescue {tick}, violation {first_violation_tick}, "
            f"{len(counts)} counts"
        )
    was, asked, least = counts[tick - 1], counts[tick], min(rescues)
    if was in rescues:
        change = next((j for j in range(tick, len(counts)) if counts[j] != was), None)
        down = change is not None and counts[change] < was
        kind = Kind.NO_SCALE_DOWN if down else Kind.HOLD
        return Difference(kind, tick, was, least, asked, change)
    if asked in rescues:
        return Difference(Kind.CHANGED_AGAIN, tick, was, least, asked, None)
    if asked > least:
        return Difference(Kind.FEWER, tick, was, least, asked, None)
    reached = next(
        (j for j in range(tick + 1, first_violation_tick + 1) if counts[j] >= least), None
    )
    if asked != was or reached is None:
        return Difference(Kind.MORE, tick, was, least, asked, None)
    return Difference(Kind.SOONER, tick, was, least, asked, reached)
