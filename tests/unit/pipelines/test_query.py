"""A query is stopped between batches: once no trigger is active, or at the wait's end."""

from __future__ import annotations

from typing import Any

import pytest

from streamscale.pipelines.query import stop_between_batches


class BusyQuery:
    """A query whose trigger is active for its first ``busy`` status polls; a fake clock
    advances by each sleep."""

    def __init__(self, busy: int, active: bool = True) -> None:
        self.busy = busy
        self.polls = 0
        self.isActive = active
        self.now = 0.0
        self.stopped_at: float | None = None
        self.stopped_while_busy = False

    @property
    def status(self) -> dict[str, Any]:
        self.polls += 1
        return {"isTriggerActive": self.polls <= self.busy}

    def stop(self) -> None:
        self.stopped_at = self.now
        self.stopped_while_busy = self.polls <= self.busy
        self.isActive = False

    def sleep(self, seconds: float) -> None:
        self.now += seconds


@pytest.mark.parametrize(
    ("busy", "wait_s", "stopped_at", "while_busy"),
    [
        (0, 10.0, 0.0, False),  # idle: stopped at once
        (5, 10.0, 0.5, False),  # a batch in flight: stopped once it has committed
        (500, 2.0, 2.0, True),  # a batch outlasting the wait: stopped at the wait's end
        (5, 0.0, 0.0, True),  # no wait: stopped at once, busy or not
    ],
)
def test_stop_waits_for_the_batch_in_flight_at_most_the_wait(
    busy: int, wait_s: float, stopped_at: float, while_busy: bool
) -> None:
    query = BusyQuery(busy)
    stop_between_batches(query, wait_s, clock=lambda: query.now, sleep=query.sleep)  # type: ignore[arg-type]
    assert query.stopped_at == pytest.approx(stopped_at)
    assert query.stopped_while_busy is while_busy
    assert not query.isActive


def test_a_query_already_ended_is_stopped_without_polling() -> None:
    query = BusyQuery(busy=5, active=False)
    stop_between_batches(query, 10.0, clock=lambda: query.now, sleep=query.sleep)  # type: ignore[arg-type]
    assert query.polls == 0 and query.stopped_at == 0.0
