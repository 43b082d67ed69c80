"""The user's word count (``autoscale/jobs/structured_kafka_wordcount.py``) as the tests that
run it feed and check it: its input lines, the counts they make, and the counts read back
from its output topic."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

JOB = Path(__file__).parent / "autoscale" / "jobs" / "structured_kafka_wordcount.py"
PARTITIONS = 4
"""Partitions of the input and output topics."""


def line(i: int) -> str:
    """The ``i``-th input line: two words, 97 and 89 distinct."""
    return f"w{i % 97} v{i % 89}"


def expected(lines: int) -> dict[str, int]:
    """Word → count over the first ``lines`` lines."""
    return dict(Counter(word for i in range(lines) for word in line(i).split()))


def fill(bootstrap: str, topic: str, start: int, stop: int) -> None:
    """Produce lines ``start`` to ``stop`` (excluded), line ``i`` to partition ``i % 4``."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "acks": "all"})
    for i in range(start, stop):
        for _ in range(100):  # a full local queue drains as the broker acknowledges
            try:
                producer.produce(topic, value=line(i).encode(), partition=i % PARTITIONS)
                break
            except BufferError:
                producer.poll(0.1)
        producer.poll(0)
    assert producer.flush(30) == 0


def counts(bootstrap: str, topic: str) -> dict[str, int]:
    """The latest count of every word in the output topic (update mode: one row per word a
    batch changed; a word's rows are all in one partition, in order)."""
    from streamscale.kafka.admin import KafkaAdmin

    admin = KafkaAdmin({"bootstrap.servers": bootstrap}, timeout_s=15)
    try:
        latest: dict[str, int] = {}
        for m in admin.read_all(topic, PARTITIONS):
            latest[m.key().decode()] = int(m.value().decode())
        return latest
    finally:
        admin.close()
