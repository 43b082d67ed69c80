"""Rate profiles: when each record of a generated load is due (pure, no I/O).

A :class:`Schedule` answers two questions for the produce loop and the record builders:
how many records are due ``t`` seconds after the start (:meth:`Schedule.due`), and when
record ``i`` is due (:meth:`Schedule.time_of`, also used as the nominal event time).

- ``steady``: ``rate`` records/s.
- ``burst``: every record due at once — as fast as the broker takes them; needs a count.
- ``ramp``: the rate rises (or falls) linearly from ``start_rate`` to ``rate`` over the
  ramp; with a count the ramp lasts until that count is reached, with a duration it lasts
  the duration.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal, get_args

from streamscale.errors import ConfigError

ProfileKind = Literal["steady", "burst", "ramp"]
PROFILE_KINDS: tuple[str, ...] = get_args(ProfileKind)


class ProfileError(ConfigError):
    """Rate, count or duration options that do not describe a load."""


@dataclass(frozen=True)
class Schedule:
    """A paced load of ``total`` records; build it with :func:`make_schedule`."""

    kind: ProfileKind
    total: int
    rate: float
    start_rate: float = 0.0
    ramp_s: float = 0.0

    def _ramp_count(self, t: float) -> float:
        slope = (self.rate - self.start_rate) / self.ramp_s
        return self.start_rate * t + slope * t * t / 2.0

    def due(self, elapsed_s: float) -> int:
        """Records due by ``elapsed_s`` seconds after the start (record 0 is due at 0)."""
        if self.kind == "burst":
            return self.total
        t = max(elapsed_s, 0.0)
        if self.kind == "steady":
            expected = self.rate * t
        elif t <= self.ramp_s:
            expected = self._ramp_count(t)
        else:
            expected = self._ramp_count(self.ramp_s) + self.rate * (t - self.ramp_s)
        # A hair of tolerance so that time_of(i) always makes record i due.
        return min(self.total, math.floor(expected + 1e-9) + 1)

    def time_of(self, index: int) -> float:
        """Seconds after the start at which record ``index`` (0-based) is due."""
        if self.kind == "burst" or index <= 0:
            return 0.0
        if self.kind == "steady":
            return index / self.rate
        in_ramp = self._ramp_count(self.ramp_s)
        if index > in_ramp:
            return self.ramp_s + (index - in_ramp) / self.rate
        # Solve start_rate*t + slope*t²/2 = index in a form stable for slope 0 and slope < 0.
        slope = (self.rate - self.start_rate) / self.ramp_s
        root = math.sqrt(max(self.start_rate**2 + 2.0 * slope * index, 0.0))
        return min(2.0 * index / (self.start_rate + root), self.ramp_s)

    def release_wait(self, index: int, elapsed_s: float, tick_s: float) -> float:
        """Seconds to wait, ``elapsed_s`` after the start, before record ``index`` may go out
        when records are released in ticks of ``tick_s``: 0 once it is ``tick_s`` past due,
        else the time until then. A producer that waits this long and then sends all that is
        :meth:`due` wakes about once a tick, whatever the rate (``rate × tick_s`` records a
        wake), and sends no record early and none more than a tick late."""
        if tick_s < 0:
            raise ProfileError(f"the release tick must be >= 0 seconds, got {tick_s}")
        return max(0.0, self.time_of(index) + tick_s - elapsed_s)

    @property
    def nominal_seconds(self) -> float:
        """How long the schedule lasts when the broker keeps up (0 for a burst)."""
        return self.time_of(self.total - 1) if self.total > 0 else 0.0


def make_schedule(
    kind: str,
    *,
    rate: float,
    count: int | None = None,
    duration_s: float | None = None,
    start_rate: float = 0.0,
) -> Schedule:
    """Resolve ``--profile``, ``--rate``, ``--count``/``--duration``, ``--start-rate``.

    Exactly one of ``count`` and ``duration_s`` is given; a burst needs ``count``. With a
    duration, the total is the number of records the profile makes due within it.
    """
    if kind not in PROFILE_KINDS:
        raise ProfileError(f"unknown profile {kind!r}: use one of {', '.join(PROFILE_KINDS)}")
    if (count is None) == (duration_s is None):
        raise ProfileError("give exactly one of --count and --duration")
    if count is not None and count < 0:
        raise ProfileError(f"--count must be >= 0, got {count}")
    if duration_s is not None and not duration_s > 0:
        raise ProfileError(f"--duration must be > 0 seconds, got {duration_s}")
    if kind == "burst":
        if count is None:
            raise ProfileError("a burst produces --count records as fast as possible: give --count")
        return Schedule("burst", count, rate=math.inf)
    if not (rate > 0 and math.isfinite(rate)):
        raise ProfileError(f"--rate must be a positive number of records/s, got {rate}")
    if kind == "steady":
        if count is None:
            assert duration_s is not None
            count = math.ceil(rate * duration_s - 1e-9)
        return Schedule("steady", count, rate=rate)
    if not (start_rate >= 0 and math.isfinite(start_rate)):
        raise ProfileError(f"--start-rate must be >= 0 records/s, got {start_rate}")
    if count is not None:
        ramp_s = 2.0 * count / (start_rate + rate) or 1.0  # count 0: any positive length
        return Schedule("ramp", count, rate=rate, start_rate=start_rate, ramp_s=ramp_s)
    assert duration_s is not None
    expected = (start_rate + rate) * duration_s / 2.0
    total = math.ceil(expected - 1e-9)
    return Schedule("ramp", total, rate=rate, start_rate=start_rate, ramp_s=duration_s)
