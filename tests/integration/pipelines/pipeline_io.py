"""Helpers of the pipeline tests: produce exact records, read a topic to its end."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from confluent_kafka import Producer

from streamscale.kafka.admin import KafkaAdmin
from streamscale.kafka.client import producer_config
from streamscale.settings import KafkaSource, Settings

# (key, value, timestamp ms, partition or None for the default partitioner)
Out = tuple[str | bytes | None, str | bytes | None, int, int | None]


@dataclass(frozen=True)
class Consumed:
    """One record read back, with its headers as a dict."""

    key: bytes | None
    value: bytes | None
    headers: dict[str, bytes]
    partition: int
    offset: int

    def header(self, name: str) -> str:
        return self.headers[name].decode()


def other_source(source: KafkaSource) -> KafkaSource:
    """The Kafka reader that is not ``source``."""
    return "streamscale-kafka" if source == "kafka" else "kafka"


def produce(settings: Settings, topic: str, records: Sequence[Out]) -> list[tuple[int, int]]:
    """Produce ``records`` in order (acks=all); return their (partition, offset)."""
    acked: list[tuple[int, int]] = []
    errors: list[str] = []

    def report(err: Any, msg: Any) -> None:
        if err is not None:
            errors.append(str(err))
        else:
            acked.append((msg.partition(), msg.offset()))

    producer = Producer(
        producer_config(settings.kafka_config(), on_delivery=report, **{"linger.ms": 0})
    )
    for key, value, ts, partition in records:
        kwargs: dict[str, Any] = {"timestamp": ts}
        if partition is not None:
            kwargs["partition"] = partition
        producer.produce(topic, value=value, key=key, **kwargs)
        producer.flush(10)  # one at a time: the log order is the list order
    assert producer.flush(30) == 0
    assert not errors, errors
    return acked


def consume_all(
    settings: Settings, topic: str, partitions: int, delivery: str = "at-least-once"
) -> list[Consumed]:
    """Every record of ``topic`` up to its true end offsets, in (partition, offset) order
    (``read_committed`` for output written exactly-once)."""
    admin = KafkaAdmin(settings.kafka_config())
    isolation = "read_committed" if delivery == "exactly-once" else None
    try:
        messages = admin.read_all(topic, partitions, isolation)
    finally:
        admin.close()
    out = [
        Consumed(m.key(), m.value(), dict(m.headers() or []), m.partition(), m.offset())
        for m in messages
    ]
    return sorted(out, key=lambda c: (c.partition, c.offset))


def assert_group_caught_up(spark: Any, settings: Settings, query: Any, topics: list[str]) -> None:
    """After a caught-up run, the query's consumer group has the end offset of every
    partition of ``topics`` committed: any lag tool reads lag 0."""
    from streamscale.kafka.commits import group_committer
    from streamscale.kafka.offsets import TopicPartition

    committer = group_committer(spark)
    assert committer is not None and committer.wait_for(query)
    admin = KafkaAdmin(settings.kafka_config())
    try:
        counts = admin.topics()
        tps = [TopicPartition(t, p) for t in topics for p in range(counts[t])]
        ends = admin.end_offsets(tps)
        committed = admin.committed(f"streamscale-{query.name}", tps)
    finally:
        admin.close()
    assert committed == ends
