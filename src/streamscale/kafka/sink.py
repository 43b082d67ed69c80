"""The ``streamscale-kafka`` streaming sink: Spark's Kafka sink columns, reliable producer.

Columns: ``value`` (required, string or binary), ``key``, ``topic`` (or option ``topic``),
``partition``, ``headers`` (array of ``{key: string, value: binary}``). Delivery is
at-least-once: each task flushes its producer and fails if any record was not acknowledged,
so a failed task is retried and a replayed micro-batch may repeat output, but nothing is lost.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from pyspark.sql.datasource import DataSourceStreamArrowWriter, WriterCommitMessage

from streamscale.kafka.client import DeliveryError, producer_config
from streamscale.kafka.options import SinkOptions

log = logging.getLogger(__name__)

FLUSH_TIMEOUT_S = 120.0


@dataclass
class SinkCommit(WriterCommitMessage):  # type: ignore[misc]
    """What one task delivered."""

    records: int


def _as_bytes(values: list[Any]) -> list[bytes | None]:
    return [v.encode() if isinstance(v, str) else v for v in values]


class KafkaStreamWriter(DataSourceStreamArrowWriter):  # type: ignore[misc]
    """Writes each task's rows with an idempotent ``acks=all`` producer."""

    def __init__(self, options: SinkOptions) -> None:
        self.options = options

    def write(self, iterator: Iterator[Any]) -> SinkCommit:
        from confluent_kafka import Producer

        failures: list[str] = []

        def on_delivery(err: Any, msg: Any) -> None:
            if err is not None:
                failures.append(f"{msg.topic()}[{msg.partition()}]: {err.str()}")

        producer = Producer(
            producer_config(
                self.options.kafka,
                on_delivery=on_delivery,
                **{"delivery.report.only.error": True},
            )
        )
        count = 0
        for batch in iterator:
            count += self._produce_batch(producer, batch, failures)
        remaining = producer.flush(FLUSH_TIMEOUT_S)
        if remaining:
            failures.append(f"{remaining} record(s) still unacknowledged after {FLUSH_TIMEOUT_S} s")
        if failures:
            raise DeliveryError(
                f"{len(failures)} record(s) not delivered to "
                f"{self.options.kafka.get('bootstrap.servers')}: " + "; ".join(failures[:3])
            )
        return SinkCommit(count)

    def _produce_batch(self, producer: Any, batch: Any, failures: Sequence[str]) -> int:
        names = batch.schema.names
        n: int = batch.num_rows
        values = _as_bytes(batch.column(names.index("value")).to_pylist())
        keys = (
            _as_bytes(batch.column(names.index("key")).to_pylist())
            if "key" in names
            else [None] * n
        )
        topics = batch.column(names.index("topic")).to_pylist() if "topic" in names else [None] * n
        parts = batch.column(names.index("partition")).to_pylist() if "partition" in names else None
        headers = batch.column(names.index("headers")).to_pylist() if "headers" in names else None
        default_topic = self.options.topic
        produce = producer.produce
        poll = producer.poll
        for i in range(n):
            topic = topics[i] or default_topic
            if topic is None:
                raise ValueError("a row has a null topic and option topic is not set")
            kwargs: dict[str, Any] = {}
            if parts is not None and parts[i] is not None:
                kwargs["partition"] = parts[i]
            if headers is not None and headers[i]:
                kwargs["headers"] = [(h["key"], h["value"]) for h in headers[i]]
            while True:
                try:
                    produce(topic, values[i], keys[i], **kwargs)
                    break
                except BufferError:
                    poll(0.05)
            if i % 1000 == 0:
                poll(0)
            if failures:
                break
        return n

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        records = sum(m.records for m in messages if isinstance(m, SinkCommit))
        log.debug("batch %d: %d records delivered", batchId, records)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        log.warning("batch %d aborted; Spark will replay it (at-least-once)", batchId)
