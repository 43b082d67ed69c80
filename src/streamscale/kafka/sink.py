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


def _bytes_column(batch: Any, name: str) -> list[bytes | None]:
    """A string or binary column as Python bytes (the cast runs in Arrow, not per row)."""
    import pyarrow as pa

    column = batch.column(batch.schema.names.index(name))
    if not pa.types.is_binary(column.type):
        column = column.cast(pa.binary())
    values: list[bytes | None] = column.to_pylist()
    return values


def _wait_for_room(producer: Any, produce: Any) -> None:
    """The local queue is full: serve delivery reports until the record fits."""
    while True:
        producer.poll(0.05)
        try:
            produce()
            return
        except BufferError:
            continue


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
        values = _bytes_column(batch, "value")
        keys = _bytes_column(batch, "key") if "key" in names else [None] * n
        topics = batch.column(names.index("topic")).to_pylist() if "topic" in names else None
        parts = batch.column(names.index("partition")).to_pylist() if "partition" in names else None
        headers = batch.column(names.index("headers")).to_pylist() if "headers" in names else None
        default_topic = self.options.topic
        produce = producer.produce
        if topics is None and parts is None and headers is None:
            # The common case, kept tight: one topic, key and value only.
            for i in range(n):
                try:
                    produce(default_topic, values[i], keys[i])
                except BufferError:
                    _wait_for_room(producer, lambda i=i: produce(default_topic, values[i], keys[i]))
                if i % 5000 == 0:
                    producer.poll(0)
                    if failures:
                        break
            return n
        for i in range(n):
            topic = (topics[i] if topics is not None else None) or default_topic
            if topic is None:
                raise ValueError("a row has a null topic and option topic is not set")
            kwargs: dict[str, Any] = {}
            if parts is not None and parts[i] is not None:
                kwargs["partition"] = parts[i]
            if headers is not None and headers[i]:
                kwargs["headers"] = [(h["key"], h["value"]) for h in headers[i]]
            try:
                produce(topic, values[i], keys[i], **kwargs)
            except BufferError:
                _wait_for_room(producer, lambda: produce(topic, values[i], keys[i], **kwargs))  # noqa: B023
            if i % 5000 == 0:
                producer.poll(0)
                if failures:
                    break
        return n

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        records = sum(m.records for m in messages if isinstance(m, SinkCommit))
        log.debug("batch %d: %d records delivered", batchId, records)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        log.warning("batch %d aborted; Spark will replay it (at-least-once)", batchId)
