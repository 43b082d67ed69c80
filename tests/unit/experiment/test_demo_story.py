"""How long the demo goes on (pure): within its budget, and past it on a slow machine while
its story moves forward."""

from __future__ import annotations

import pytest

from streamscale.experiment.demo import (
    PROGRESS_S,
    SETTLE_MAX_S,
    SETTLE_S,
    story_goes_on,
    whole_load_seen,
)
from streamscale.experiment.report import TimelinePoint

D = 80.0


def points(*lags: tuple[float, int | None, int]) -> list[TimelinePoint]:
    return [TimelinePoint(t=t, total_lag=lag, executors_running=n) for t, lag, n in lags]


@pytest.mark.parametrize(
    ("pts", "load_done", "elapsed", "want"),
    [
        ([], False, 10.0, "run"),
        (points((70, 0, 1)), True, 79.0, "run"),
        # the story ended: load done, caught up, executors back at the minimum
        (points((90, 0, 1)), True, 90.0, "stop"),
        (points((90, 5_000, 2)), True, 90.0, "settle"),
        (points((90, 0, 2)), True, 90.0, "settle"),
        # past the budget: the drain moves on
        (
            points((D + SETTLE_S - 70, 50_000, 2), (D + SETTLE_S + 5, 20_000, 2)),
            True,
            D + SETTLE_S + 5,
            "slow",
        ),
        # past the budget: a burst produced late peaked within the window and now drains,
        # still above the lag a window ago (seen beside stress-ng and other load)
        (
            points(
                (D + SETTLE_S - 70, 427_582, 2),
                (D + SETTLE_S - 30, 575_193, 2),
                (D + SETTLE_S + 5, 475_213, 2),
            ),
            True,
            D + SETTLE_S + 5,
            "slow",
        ),
        # past the budget: the lag no longer falls
        (
            points((D + SETTLE_S - 70, 20_000, 2), (D + SETTLE_S + 5, 20_000, 2)),
            True,
            D + SETTLE_S + 5,
            "stop",
        ),
        # past the budget: caught up, the scale-in waits out its window
        (points((D + SETTLE_S + 5, 0, 2)), True, D + SETTLE_S + 5, "slow"),
        # past the budget: the load is still being produced
        (points((D + SETTLE_S + 5, 90_000, 2)), False, D + SETTLE_S + 5, "slow"),
        # never past the hard cap
        (points((D + SETTLE_MAX_S, 0, 2)), False, D + SETTLE_MAX_S, "stop"),
        # no lag known yet (first batches slower than the metrics' age limit): not yet
        (points((D + SETTLE_S + 5, None, 2)), True, D + SETTLE_S + 5, "slow"),
        # ... but two windows past the budget without any: no sign of progress
        (
            points((D + SETTLE_S + 2 * PROGRESS_S + 1, None, 2)),
            True,
            D + SETTLE_S + 2 * PROGRESS_S + 1,
            "stop",
        ),
        # a sample missing now and then (slow batches) is no stop: the newest known counts
        (
            points(
                (D + SETTLE_S - 70, 50_000, 2),
                (D + SETTLE_S, 20_000, 2),
                (D + SETTLE_S + 5, None, 2),
            ),
            True,
            D + SETTLE_S + 5,
            "slow",
        ),
    ],
)
def test_story_goes_on(
    pts: list[TimelinePoint], load_done: bool, elapsed: float, want: str
) -> None:
    assert story_goes_on(pts, load_done, elapsed, D, 1) == want


def test_progress_is_judged_over_its_window() -> None:
    t = D + SETTLE_S + 10
    # the lag appeared less than a window ago (a slow start): too early to judge
    recent = points((t - PROGRESS_S / 2, 10_000, 2), (t, 10_000, 2))
    assert story_goes_on(recent, True, t, D, 1) == "slow"
    # a whole window of it, not falling: the story stopped moving
    flat = points((t - PROGRESS_S, 10_000, 2), (t, 10_000, 2))
    assert story_goes_on(flat, True, t, D, 1) == "stop"
    # gaps in the lag (batches longer than the metrics' age limit) shorter than two windows
    gap = points((t - 2 * PROGRESS_S, 30_000, 2), (t - PROGRESS_S, 20_000, 2), (t, None, 2))
    assert story_goes_on(gap, True, t, D, 1) == "slow"


@pytest.mark.parametrize(
    ("done_at", "samples", "want"),
    [
        (None, [1.0, 2.0, 3.0], False),  # the load goes on
        (10.0, [5.0, 9.9], False),  # every batch planned before its end
        (10.0, [5.0, 12.0], False),  # one batch after: it may have been planned before
        (10.0, [12.0, 12.0, 12.0], False),  # the same sample read three times
        (10.0, [5.0, 12.0, 14.5], True),  # the second was planned after the load's end
    ],
)
def test_whole_load_seen(done_at: float | None, samples: list[float], want: bool) -> None:
    """A run whose first batches end after a short load read a lag of 0 from end offsets
    taken before the burst (a fresh clone, 2026-11-28: the demo stopped at 100 s with 110,306
    records behind): the story ends only on a lag read after the whole load."""
    assert whole_load_seen(done_at, samples) is want
