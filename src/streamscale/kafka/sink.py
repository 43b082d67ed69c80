"""The ``streamscale-kafka`` streaming sink: Spark's Kafka sink columns, reliable producer.

Columns: ``value`` (required, string or binary), ``key``, ``topic`` (or option ``topic``),
``partition``, ``headers`` (array of ``{key: string, value: binary}``). Delivery is
at-least-once: each task flushes its producer and fails if any record was not acknowledged,
so a failed task is retried and a replayed micro-batch may repeat output, but nothing is
lost. :func:`write_rows` (the pipelines' writer) takes option ``delivery=exactly-once``:
each task writes in one Kafka transaction (:mod:`.transactions`); the data source sink
refuses it (:mod:`.exactly_once` is the writer for users' queries).

A Python worker keeps its producer for the next task with the same connection
(:func:`reused_producer`): a new idempotent producer costs about 0.5 s before its first
acknowledgement on this machine (5,000 records: 0.53-0.54 s with a new producer, 0.035-0.057
s with a kept one), once per task and micro-batch otherwise. A write that failed drops it.
"""

from __future__ import annotations

import itertools
import logging
import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from pyspark.sql.datasource import DataSourceStreamArrowWriter, WriterCommitMessage

from streamscale.errors import ConfigError
from streamscale.kafka.client import DeliveryError, producer_config
from streamscale.kafka.collector import collector_paused
from streamscale.kafka.options import SinkOptions, parse_sink

log = logging.getLogger(__name__)

FLUSH_TIMEOUT_S = 120.0


@dataclass
class SinkCommit(WriterCommitMessage):  # type: ignore[misc]
    """What one task delivered."""

    records: int


POLL_EVERY = 5000


def _bytes_column(batch: Any, name: str) -> list[bytes | None]:
    """A string or binary column as Python bytes (the cast runs in Arrow, not per row)."""
    import pyarrow as pa

    column = batch.column(batch.schema.names.index(name))
    if not pa.types.is_binary(column.type):
        column = column.cast(pa.binary())
    values: list[bytes | None] = column.to_pylist()
    return values


def _by_topic(batch: Any, default_topic: str | None) -> Iterator[tuple[str, Any]]:
    """The batch's rows per destination topic, each in its original order.

    Only the order within a topic (and so within a topic partition) is Kafka's to keep; a
    batch usually holds one topic (output) or two (output and dead letters).
    """
    import pyarrow.compute as pc

    names = batch.schema.names
    if "topic" not in names:
        if default_topic is None:
            raise ConfigError("the rows have no topic column and option topic is not set")
        yield default_topic, batch
        return
    topics = batch.column(names.index("topic"))
    if default_topic is not None:
        topics = pc.fill_null(topics, default_topic)
    elif topics.null_count:
        raise ConfigError("a row has a null topic and option topic is not set")
    distinct = pc.unique(topics).to_pylist()
    if len(distinct) == 1:
        yield distinct[0], batch
        return
    for topic in distinct:
        yield topic, batch.filter(pc.equal(topics, topic))


def _plain_rows(batch: Any) -> Any:
    """A NumPy mask of the rows with neither headers nor an explicit partition."""
    import numpy as np
    import pyarrow.compute as pc

    names = batch.schema.names
    plain = np.ones(batch.num_rows, dtype=bool)
    if "headers" in names:
        lengths = pc.fill_null(pc.list_value_length(batch.column(names.index("headers"))), 0)
        plain &= lengths.to_numpy(zero_copy_only=False) == 0
    if "partition" in names:
        plain &= batch.column(names.index("partition")).is_null().to_numpy(zero_copy_only=False)
    return plain


def _runs(mask: Any) -> list[tuple[int, int, bool]]:
    """``mask`` as maximal runs ``(start, end, value)``."""
    import numpy as np

    if len(mask) == 0:
        return []
    edges = np.flatnonzero(mask[1:] != mask[:-1]) + 1
    starts = [0, *edges.tolist()]
    ends = [*edges.tolist(), len(mask)]
    return [(a, b, bool(mask[a])) for a, b in zip(starts, ends, strict=True)]


def produce_rows(
    producer: Any, batch: Any, default_topic: str | None, failures: Sequence[str]
) -> int:
    """Hand every row of an Arrow batch to ``producer``; stop early once a delivery failed.

    Rows without headers or an explicit partition (nearly all) go through a tight loop of
    positional ``produce`` calls; the others are converted one by one.
    """
    produce = producer.produce
    for topic, rows in _by_topic(batch, default_topic):
        names = rows.schema.names
        n: int = rows.num_rows
        values = _bytes_column(rows, "value")
        keys = _bytes_column(rows, "key") if "key" in names else [None] * n
        for start, end, plain in _runs(_plain_rows(rows)):
            if plain:
                for a in range(start, end, POLL_EVERY):
                    b = min(a + POLL_EVERY, end)
                    for value, key in zip(values[a:b], keys[a:b], strict=True):
                        try:
                            produce(topic, value, key)
                        except BufferError:
                            _wait_for_room(producer, lambda: produce(topic, value, key))  # noqa: B023
                    producer.poll(0)
                    if failures:
                        return 0
                continue
            part = rows.slice(start, end - start)
            headers = (
                part.column(names.index("headers")).to_pylist() if "headers" in names else None
            )
            parts = (
                part.column(names.index("partition")).to_pylist() if "partition" in names else None
            )
            for i in range(end - start):
                kwargs: dict[str, Any] = {}
                if parts is not None and parts[i] is not None:
                    kwargs["partition"] = parts[i]
                if headers is not None and headers[i]:
                    kwargs["headers"] = [(h["key"], h["value"]) for h in headers[i]]
                value, key = values[start + i], keys[start + i]
                try:
                    produce(topic, value, key, **kwargs)
                except BufferError:
                    _wait_for_room(producer, lambda: produce(topic, value, key, **kwargs))  # noqa: B023
            producer.poll(0)
            if failures:
                return 0
    rows_total: int = batch.num_rows
    return rows_total


def _wait_for_room(producer: Any, produce: Any) -> None:
    """The local queue is full: serve delivery reports until the record fits."""
    while True:
        producer.poll(0.05)
        try:
            produce()
            return
        except BufferError:
            continue


@dataclass
class _Kept:
    """A producer kept by a process, and the failed deliveries of the write using it."""

    producer: Any = None
    failures: list[str] = field(default_factory=list)

    def on_delivery(self, err: Any, msg: Any) -> None:
        if err is not None:
            self.failures.append(f"{msg.topic()}[{msg.partition()}]: {err.str()}")


_kept: dict[tuple[tuple[str, str], ...], _Kept] = {}
_kept_lock = threading.Lock()


@contextmanager
def reused_producer(kafka: Mapping[str, Any]) -> Iterator[tuple[Any, list[str]]]:
    """This process's reliable producer for the connection ``kafka`` (made on first use) and
    the list its failed deliveries go to during this write.

    The producer is taken out while in use (a concurrent write makes its own) and kept again
    only when the write ended without an exception or a failed delivery; the caller flushes.
    """
    from confluent_kafka import Producer

    key = tuple(sorted((k, str(v)) for k, v in kafka.items()))
    with _kept_lock:
        kept = _kept.pop(key, None)
    if kept is None:
        kept = _Kept()
        kept.producer = Producer(
            producer_config(
                kafka, on_delivery=kept.on_delivery, **{"delivery.report.only.error": True}
            )
        )
    kept.failures = []
    yield kept.producer, kept.failures
    if not kept.failures:
        with _kept_lock:
            _kept.setdefault(key, kept)


def close_kept_producers(timeout_s: float = 5.0) -> int:
    """Flush and close every producer this process keeps; returns how many. Called before
    the brokers they talk to stop (``streamscale.spark.stop`` does): a kept producer would
    otherwise retry them for as long as the process lives, and librdkafka logs each failed
    connect on the console. Producers in use by a write are not kept, hence not closed."""
    from streamscale.kafka import transactions

    with _kept_lock:
        kept = list(_kept.values())
        _kept.clear()
    for item in kept:
        try:
            item.producer.flush(timeout_s)
        finally:
            item.producer.close()
    return len(kept) + transactions.close_kept(timeout_s)


class KafkaStreamWriter(DataSourceStreamArrowWriter):  # type: ignore[misc]
    """Writes each task's rows with an idempotent ``acks=all`` producer."""

    def __init__(self, options: SinkOptions, unit: str | None = None) -> None:
        self.options = options
        self.unit = unit
        """Exactly-once: the name of this write's unit (default: the task partition)."""

    def write(self, iterator: Iterator[Any]) -> SinkCommit:
        with collector_paused():
            return self._write(iterator)

    def _write(self, iterator: Iterator[Any]) -> SinkCommit:
        if self.options.delivery == "exactly-once":
            from streamscale.kafka import transactions

            unit, batch_id = transactions.current_unit(self.options.role, self.unit)
            return SinkCommit(
                transactions.write_transactional(
                    self.options.kafka,
                    iter(iterator),
                    self.options.topic,
                    unit,
                    batch_id,
                    produce_rows,
                    self.options.marker_topic,
                )
            )
        with reused_producer(self.options.kafka) as (producer, failures):
            count = 0
            for batch in iterator:
                count += produce_rows(producer, batch, self.options.topic, failures)
            remaining = producer.flush(FLUSH_TIMEOUT_S)
            if remaining:
                failures.append(
                    f"{remaining} record(s) still unacknowledged after {FLUSH_TIMEOUT_S} s"
                )
        if failures:
            from streamscale.kafka.admin import explain_unacknowledged

            message = (
                f"{len(failures)} record(s) not delivered to "
                f"{self.options.kafka.get('bootstrap.servers')}: " + "; ".join(failures[:3])
            )
            topics = sorted({f.split("[", 1)[0] for f in failures if "[" in f})
            why = explain_unacknowledged(self.options.kafka, topics) if topics else None
            raise DeliveryError(message if why is None else f"{why}: {message}")
        return SinkCommit(count)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        records = sum(m.records for m in messages if isinstance(m, SinkCommit))
        log.debug("batch %d: %d records delivered", batchId, records)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        log.warning("batch %d aborted; Spark will replay it (at-least-once)", batchId)


def write_rows(
    sink_options: Mapping[str, str], batches: Iterable[Any], unit: str | None = None
) -> int:
    """Write Arrow batches of sink rows (``key, value, topic[, headers]``) with the sink's
    producer, outside a streaming query (a task or the driver); records delivered.

    The same delivery checks as the sink: a record not acknowledged raises
    :class:`.client.DeliveryError`. With ``delivery=exactly-once``, ``unit`` names the
    write's transactional unit (:func:`.transactions.input_unit`; default the task
    partition, which only a shuffle's output keeps on a replay).
    """
    batches = iter(batches)
    first = next(batches, None)
    if first is None:
        return 0
    options = parse_sink(sink_options, first.schema.names)
    commit = KafkaStreamWriter(options, unit).write(itertools.chain([first], batches))
    return commit.records
