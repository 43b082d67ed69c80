"""Watermarks asked of a partition's leader: a leader change is waited out, nothing else."""

from __future__ import annotations

from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException

from streamscale.errors import KafkaRequestError
from streamscale.kafka.admin import query_watermarks


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


class Consumer:
    """Answers ``get_watermark_offsets`` with the next of ``answers``: an error code raises,
    a pair is returned; each call costs ``cost_s`` on the clock."""

    def __init__(self, clock: FakeClock, answers: list[int | tuple[int, int]], cost_s: float):
        self.clock, self.answers, self.cost_s = clock, answers, cost_s
        self.calls: list[Any] = []

    def get_watermark_offsets(self, tp: Any, timeout: float, cached: bool) -> tuple[int, int]:
        self.calls.append((tp.topic, tp.partition, timeout, cached))
        self.clock.now += self.cost_s
        answer = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        if isinstance(answer, int):
            raise KafkaException(KafkaError(answer))
        return answer


NOT_LEADER = KafkaError.NOT_LEADER_FOR_PARTITION
NO_LEADER = KafkaError.LEADER_NOT_AVAILABLE
TRANSPORT = KafkaError._TRANSPORT
UNKNOWN_TOPIC = KafkaError.UNKNOWN_TOPIC_OR_PART


@pytest.mark.parametrize(
    ("answers", "calls"),
    [
        ([(3, 10)], 1),
        ([NOT_LEADER, (3, 10)], 2),  # the killed leader's answer, then the new leader's
        ([TRANSPORT, NO_LEADER, NOT_LEADER, (3, 10)], 4),
    ],
)
def test_a_leader_change_is_waited_out(answers: list[int | tuple[int, int]], calls: int) -> None:
    clock = FakeClock()
    consumer = Consumer(clock, answers, cost_s=0.1)
    got = query_watermarks(consumer, "t", 2, 30.0, clock=clock, sleep=clock.sleep)
    assert got == (3, 10)
    assert len(consumer.calls) == calls
    assert all(c[:2] == ("t", 2) and c[3] is False for c in consumer.calls)  # asked, not cached


def test_another_error_is_one_line_at_once() -> None:
    clock = FakeClock()
    consumer = Consumer(clock, [UNKNOWN_TOPIC], cost_s=0.1)
    with pytest.raises(KafkaRequestError, match=r"^cannot read offsets of t-2: .*") as info:
        query_watermarks(consumer, "t", 2, 30.0, clock=clock, sleep=clock.sleep)
    assert "\n" not in str(info.value)
    assert len(consumer.calls) == 1


def test_a_leader_change_outlasting_the_timeout_is_one_line() -> None:
    clock = FakeClock()
    consumer = Consumer(clock, [NOT_LEADER], cost_s=1.0)
    with pytest.raises(KafkaRequestError, match="Not leader for partition"):
        query_watermarks(consumer, "t", 0, 10.0, clock=clock, sleep=clock.sleep)
    assert 10.0 <= clock.now <= 12.0  # bounded: it stops once the timeout has passed
    assert all(0 < c[2] <= 10.0 for c in consumer.calls)  # each call within what is left
