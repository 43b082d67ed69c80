"""The benchmarks' Kafka input: topics created alike and filled as fast as one producer goes.

Shared by ``pipelines.py``, ``kstreams.py``, ``table_state.py`` and ``session_state.py``, so
that every engine they compare reads the same topics (partitions, explicit configs) filled the
same way from the same seed. It imports no benchmark script: they import it.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from typing import Any

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from streamscale.kafka.client import producer_config
from streamscale.settings import Settings

PARTITIONS = 4
SEED = 42
FRAME_RATE = 20_000  # event-time frames/s of the generated game frames
# Quix reads topic configs back and needs these explicitly (the embedded broker reports
# only explicit configs); harmless for the others.
EXPLICIT = {"retention.ms": str(7 * 24 * 3600 * 1000), "retention.bytes": "-1"}
# Output topics stamped by the broker, so that an output's latency is read from its timestamps.
LOG_APPEND = {"message.timestamp.type": "LogAppendTime"}


def create_topics(settings: Settings, specs: Mapping[str, Mapping[str, str]]) -> None:
    """Create each topic of ``specs`` (name -> its configs, over :data:`EXPLICIT`) with
    :data:`PARTITIONS` partitions."""
    admin = AdminClient(settings.kafka_config())
    topics = [
        NewTopic(name, PARTITIONS, 1, config={**EXPLICIT, **conf}) for name, conf in specs.items()
    ]
    for future in admin.create_topics(topics).values():
        future.result(timeout=30)


def create(settings: Settings, names: Iterable[str], compact: Iterable[str] = ()) -> None:
    """Create input topics: those of ``compact`` compacted (tables), the others not."""
    tables = set(compact)
    create_topics(
        settings, {n: {"cleanup.policy": "compact" if n in tables else "delete"} for n in names}
    )


def produce_all(
    settings: Settings, records: Iterable[tuple[Any, ...]], scatter: str | None = None
) -> tuple[int, float]:
    """Produce generator records ``(topic, key, value, ts, counted)`` as fast as possible
    (ts 0: the producer stamps now); records of topic ``scatter`` go round-robin over the
    partitions instead of by key. The count and the seconds it took."""
    producer = Producer(
        producer_config(
            settings.kafka_config(),
            **{"linger.ms": 50, "queue.buffering.max.messages": 500_000},
        )
    )
    began = time.perf_counter()
    count = 0
    for topic, key, value, ts, _ in records:
        kwargs = {"timestamp": ts} if ts else {}
        if topic == scatter:
            kwargs["partition"] = count % PARTITIONS
        while True:
            try:
                producer.produce(topic, value, key, **kwargs)
                break
            except BufferError:
                producer.poll(0.01)
        count += 1
    if producer.flush(120) != 0:
        raise RuntimeError("records still unacknowledged after 120 s")
    return count, time.perf_counter() - began
