"""Exactly-once output to Kafka from Spark tasks: transactions with stable ids and a marker.

Spark's Kafka sink is at-least-once: a task retried elsewhere, or a micro-batch replayed
after the driver died between writing and committing it, writes its output again. Here
every *output unit* writes in Kafka transactions:

- **A stable transactional id per unit**: ``streamscale-<query id>-<role>-<task partition>``.
  The query id is Spark's (kept in the checkpoint, the same after a restart); the role names
  the stage that writes (one query may write from two stages: the game sessions' dead
  letters and sessions); the task partition is the partition of the micro-batch the task
  writes. A retried task or a replayed batch uses the same id, and its
  ``init_transactions()`` fences any earlier producer with that id (a zombie task still
  running) and aborts its open transaction. Spark tasks are not consumer-group members:
  the transactional id is the only fence.
- **A marker of what each transaction completed**: the batch id, written in the same
  transaction to the compacted topic :data:`MARKER_TOPIC`, keyed by the transactional id.
  A producer made for a unit reads it (``read_committed``) after ``init_transactions()``;
  a unit whose batch is already committed writes nothing (the task still runs to the end:
  whatever it computes besides the output is still computed). A producer kept by a Python
  worker remembers the last batch it committed; if another producer used its id since, it
  is fenced, which shows on the marker it writes first in each transaction (before any
  output is taken from the task), and it is replaced once by a new producer that reads the
  marker.
- **Who keeps the producer.** A Python worker keeps its producers between tasks
  (:func:`write_transactional`), but Spark hands each task to whichever of the executor's
  Python workers is idle first, so a unit's next task mostly lands on another worker, whose
  new producer fences the kept one: measured on the enrichment, 16 of 18 write tasks paid a
  new producer (``init_transactions`` 50-100 ms, or about 510 ms, and the marker read). The
  enrichment's output is therefore written by the executor JVM (:func:`write_in_jvm`,
  ``jvm/operators``' ``TransactionalWriter``), which keeps one producer per id for its life;
  the same ids, markers and rules. Writes that happen inside a Python task (dead letters of
  a parse task, the game sessions, users' :mod:`.exactly_once` writer) stay here.
- ``transaction.timeout.ms`` (:data:`TRANSACTION_TIMEOUT_MS`, option
  ``kafka.transaction.timeout.ms``) must exceed a task's time; a dead producer's open
  transaction holds back every ``read_committed`` reader of its partitions until that id
  is used again or the timeout aborts it.

**What this needs, and what breaks it.** The unit's rows must be the same on a replay: the
micro-batch's partitioning must be deterministic (the offsets of a replayed batch are in the
offset log; Spark's Kafka connector and the project's source plan one partition per
topic-partition, or per partition number when co-partitioned, in an order fixed by those
offsets; a hash shuffle sends each key to the same partition; changing
``spark.sql.shuffle.partitions`` is refused by Spark for a checkpoint). ``minPartitions``
splits, a round-robin ``repartition(n)`` without sort, or non-deterministic expressions
(``rand``, ``uuid``...) are refused by :func:`check_deterministic` where a DataFrame is seen.
Readers must set ``isolation.level=read_committed``; a ``read_uncommitted`` reader sees
aborted transactions' records (zombies', failed tasks').

Pure helpers (naming, marker codec, skip rule) are plain functions; the producer and the
marker read are the I/O at the edge.
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
import time
import uuid
import zlib
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from streamscale.errors import ConfigError, KafkaRequestError
from streamscale.kafka.admin import TopicSpec, query_watermarks
from streamscale.kafka.client import DeliveryError, producer_config
from streamscale.kafka.options import HEADERS_TYPE, MARKER_TOPIC

log = logging.getLogger(__name__)

MARKER_PARTITIONS: Final = 16
TRANSACTION_TIMEOUT_MS: Final = 60_000
BATCH_ID_PROPERTY: Final = "streaming.sql.batchId"
QUERY_ID_PROPERTY: Final = "sql.streaming.queryId"
DRIVER_PARTITION: Final = -1


class NotExactError(ConfigError):
    """A write that exactly-once delivery cannot make exact (the message says what to change)."""


# --- pure ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Unit:
    """One output unit of a query: the stage role and the task partition that write it."""

    query_id: str
    role: str
    partition: int | str
    """The task partition, or a name of the task's input (:func:`input_unit`)."""

    @property
    def transactional_id(self) -> str:
        where = "driver" if self.partition == DRIVER_PARTITION else str(self.partition)
        return id_prefix(self.query_id, self.role) + where


def id_prefix(query_id: str, role: str) -> str:
    """What every transactional id of ``query_id``'s ``role`` starts with (the JVM writer
    appends the task partition to it)."""
    return f"streamscale-{query_id}-{role}-"


def input_unit(pairs: Iterable[tuple[str, int]]) -> str:
    """A task's unit named by the Kafka topic-partitions it read: ``topic-p`` for one,
    ``pN`` for partition N of several topics (a co-partitioned read), else a digest.

    Spark's connector does NOT plan a batch's topic-partitions in the same order on a replay
    after a restart (measured: a unit numbered by the task partition then holds another
    topic-partition's rows, and the marker skips the wrong ones): a task that reads Kafka
    directly is named by what it read, which the offset log fixes."""
    found = sorted(set(pairs))
    if len(found) == 1:
        return f"{found[0][0]}-{found[0][1]}"
    numbers = {p for _, p in found}
    if len(numbers) == 1:
        return f"p{numbers.pop()}"
    text = ",".join(f"{t}:{p}" for t, p in found)
    return "h" + hashlib.sha1(text.encode()).hexdigest()[:16]


def arrow_input_pairs(batch: Any) -> set[tuple[str, int]]:
    """The distinct ``(topic, partition)`` of an Arrow batch of source rows."""
    import pyarrow.compute as pc

    topics = batch.column(batch.schema.names.index("topic"))
    parts = batch.column(batch.schema.names.index("partition"))
    pairs = pc.unique(pc.binary_join_element_wise(topics, pc.cast(parts, "string"), "\x00"))
    out = set()
    for text in pairs.to_pylist():
        topic, _, part = str(text).rpartition("\x00")
        out.add((topic, int(part)))
    return out


def marker_partition(transactional_id: str, partitions: int) -> int:
    """The marker topic's partition for ``transactional_id`` (stable: CRC-32)."""
    return zlib.crc32(transactional_id.encode()) % partitions


def marker_value(batch_id: int) -> bytes:
    return json.dumps({"batch": batch_id}).encode()


def marker_batch(value: bytes | None) -> int | None:
    """The batch id a marker records (None for a tombstone or a foreign record)."""
    if not value:
        return None
    try:
        found = json.loads(value).get("batch")
    except (ValueError, AttributeError):
        return None
    return int(found) if isinstance(found, int) else None


def already_committed(batch_id: int, committed: int | None) -> bool:
    """True when the unit's last committed transaction is this batch or a later one."""
    return committed is not None and batch_id <= committed


# --- where a write runs: the unit and batch of the current task -----------------------------


def current_unit(role: str, part: str | None = None) -> tuple[Unit, int]:
    """The unit and batch id of the running Spark task (or of the driver in a micro-batch),
    from the local properties Spark's micro-batch execution sets; ``part`` names the unit
    (:func:`input_unit`) instead of the task partition."""
    from pyspark import TaskContext

    context = TaskContext.get()
    if context is not None:
        batch = context.getLocalProperty(BATCH_ID_PROPERTY)
        query = context.getLocalProperty(QUERY_ID_PROPERTY)
        partition = context.partitionId()
    else:
        from pyspark import SparkContext

        sc = SparkContext._active_spark_context
        batch = sc.getLocalProperty(BATCH_ID_PROPERTY) if sc is not None else None
        query = sc.getLocalProperty(QUERY_ID_PROPERTY) if sc is not None else None
        partition = DRIVER_PARTITION
    if batch is None or query is None:
        raise NotExactError(
            "delivery=exactly-once writes from a streaming micro-batch only (no batch id "
            "here): write from foreachBatch or the streaming sink, or use at-least-once"
        )
    return Unit(str(query), role, partition if part is None else part), int(batch)


# --- I/O: the marker topic, the marker read, kept transactional producers -------------------

_ensured: dict[tuple[str, str], int] = {}


def marker_topic_spec(
    topic: str = MARKER_TOPIC, replication_factor: int | None = None
) -> TopicSpec:
    """The marker topic as it should be: compacted (one live marker per transactional id),
    :data:`MARKER_PARTITIONS` partitions, small segments so that compaction keeps it small."""
    from streamscale.kafka.admin import TopicSpec

    return TopicSpec(
        topic,
        MARKER_PARTITIONS,
        replication_factor,
        table=True,
        configs={"segment.ms": "600000", "min.cleanable.dirty.ratio": "0.1"},
    )


def ensure_marker_topic(kafka: Mapping[str, Any], topic: str, timeout_s: float = 30.0) -> int:
    """Create the compacted marker topic if missing; its partition count."""
    from streamscale.kafka.admin import KafkaAdmin

    key = (str(kafka.get("bootstrap.servers")), topic)
    known = _ensured.get(key)
    if known is not None:
        return known
    admin = KafkaAdmin(kafka, timeout_s)
    try:
        count = admin.topics().get(topic)
        if count is None:  # missing, or without a leader while a broker is lost
            try:
                admin.apply([marker_topic_spec(topic)])
            except KafkaRequestError as exc:  # another task created it first
                if "already exists" not in str(exc).lower():
                    raise
            count = admin.wait_for_topics([topic])[topic]
    finally:
        admin.close()
    _ensured[key] = count
    return count


def read_marker(
    kafka: Mapping[str, Any], topic: str, partitions: int, transactional_id: str, timeout_s: float
) -> int | None:
    """The last committed batch of ``transactional_id`` in the marker topic (None: never),
    read with ``read_committed`` up to the partition's high watermark taken now: call it
    after ``init_transactions()``, which completes the id's earlier transaction first."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

    part = marker_partition(transactional_id, partitions)
    consumer = Consumer(
        {
            **kafka,
            "group.id": f"streamscale-marker-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
            "enable.partition.eof": True,
            "fetch.queue.backoff.ms": 10,
            # At the end of the partition a fetch waits this long for more (500 ms by
            # default): a new producer reads its marker on the task's path.
            "fetch.wait.max.ms": 10,
        }
    )
    found: int | None = None
    key = transactional_id.encode()
    try:
        _, high = query_watermarks(consumer, topic, part, timeout_s)
        if high <= 0:
            return None
        consumer.assign([TopicPartition(topic, part, OFFSET_BEGINNING)])
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            # consume() returns at its timeout unless it has num_messages: a short one (a
            # 0.2 s one cost every new producer 0.2 s, measured)
            for msg in consumer.consume(1000, 0.01):
                err = msg.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        if msg.offset() >= high:
                            return found
                        continue
                    raise DeliveryError(f"reading the marker of {transactional_id}: {err.str()}")
                if msg.key() == key:
                    batch = marker_batch(msg.value())
                    if batch is not None:
                        found = batch
            position = consumer.position([TopicPartition(topic, part)])[0].offset
            if position >= high:
                return found
        raise DeliveryError(
            f"could not read the marker of {transactional_id} in {topic}[{part}] within "
            f"{timeout_s:.0f} s (an open transaction holds it back)"
        )
    finally:
        consumer.close()


@dataclass
class TxnProducer:
    """A transactional producer for one id, the last batch it knows committed, and the
    failed deliveries of the transaction in progress."""

    producer: Any
    transactional_id: str
    committed: int | None
    failures: list[str] = field(default_factory=list)

    def on_delivery(self, err: Any, msg: Any) -> None:
        if err is not None:
            self.failures.append(f"{msg.topic()}[{msg.partition()}]: {err.str()}")


_kept: dict[tuple[tuple[tuple[str, str], ...], str], TxnProducer] = {}
_kept_lock = threading.Lock()
INIT_TIMEOUT_S: Final = 60.0


def _conn_key(kafka: Mapping[str, Any]) -> tuple[tuple[str, str], ...]:
    return tuple(sorted((k, str(v)) for k, v in kafka.items()))


def open_producer(
    kafka: Mapping[str, Any], transactional_id: str, marker_topic: str
) -> TxnProducer:
    """A new transactional producer for ``transactional_id``: ``init_transactions()`` (fences
    every earlier producer of the id), then the id's marker read."""
    from confluent_kafka import Producer

    partitions = ensure_marker_topic(kafka, marker_topic)
    holder = TxnProducer(None, transactional_id, None)
    timeout_ms = int(kafka.get("transaction.timeout.ms", TRANSACTION_TIMEOUT_MS))
    base = {**kafka, "transaction.timeout.ms": timeout_ms}
    for key in ("delivery.timeout.ms", "message.timeout.ms"):
        # librdkafka: a record's delivery timeout may not exceed the transaction's
        base[key] = min(int(base.get(key, timeout_ms)), timeout_ms)
    conf = producer_config(
        base,
        on_delivery=holder.on_delivery,
        **{"transactional.id": transactional_id, "delivery.report.only.error": True},
    )
    holder.producer = Producer(conf)
    try:
        holder.producer.init_transactions(INIT_TIMEOUT_S)
        holder.committed = read_marker(
            kafka, marker_topic, partitions, transactional_id, INIT_TIMEOUT_S
        )
    except Exception:
        _close(holder)
        raise
    return holder


def _close(holder: TxnProducer) -> None:
    try:
        holder.producer.close()
    except Exception:  # a fenced producer may refuse; it is dropped either way
        log.debug("closing %s failed", holder.transactional_id, exc_info=True)


def take_producer(
    kafka: Mapping[str, Any], transactional_id: str, marker_topic: str
) -> TxnProducer:
    """This process's kept producer for the id, or a new one."""
    key = (_conn_key(kafka), transactional_id)
    with _kept_lock:
        kept = _kept.pop(key, None)
    return kept if kept is not None else open_producer(kafka, transactional_id, marker_topic)


def keep_producer(kafka: Mapping[str, Any], holder: TxnProducer) -> None:
    key = (_conn_key(kafka), holder.transactional_id)
    with _kept_lock:
        old = _kept.pop(key, None)
        _kept[key] = holder
    if old is not None and old is not holder:
        _close(old)


def close_kept(timeout_s: float = 5.0) -> int:
    """Close every kept transactional producer (none has a transaction open); how many."""
    with _kept_lock:
        kept = list(_kept.values())
        _kept.clear()
    for holder in kept:
        _close(holder)
    return len(kept)


def _abort(holder: TxnProducer) -> None:
    try:
        holder.producer.abort_transaction(INIT_TIMEOUT_S)
    except Exception:
        log.debug("abort of %s failed", holder.transactional_id, exc_info=True)


FLUSH_TIMEOUT_S: Final = 120.0


JVM_WRITER: Final = "io.streamscale.operators.TransactionalWriter"
JVM_COLUMNS: Final = (
    ("key", "BINARY"),
    ("value", "BINARY"),
    ("topic", "STRING"),
    ("counts", "STRING"),
    ("headers", HEADERS_TYPE),
)
JVM_ROWS: Final = ", ".join(f"{name} {kind}" for name, kind in JVM_COLUMNS)
"""The rows :func:`write_in_jvm` takes: sink rows (``counts`` null; ``headers`` null or the
record's Kafka headers), and pass-through rows whose ``counts`` (a task's text, not written)
come back to the driver."""


def write_in_jvm(
    rows: Any,
    java_kafka: Mapping[str, str],
    admin_kafka: Mapping[str, Any],
    role: str,
    marker_topic: str = MARKER_TOPIC,
) -> list[tuple[int, str]]:
    """Write a micro-batch's ``rows`` (:data:`JVM_ROWS`; call from ``foreachBatch``) in the
    executors' JVM, one transaction per task partition (unit ``role``, the task partition),
    with the producers the executor JVM keeps (:data:`JVM_WRITER`); per pass-through row,
    the records its task wrote and its ``counts``.

    The same transactions, ids and markers as :func:`write_transactional`; what differs is
    who keeps the producer. A Python worker's kept producer is fenced whenever its unit's
    next task lands on another Python worker of the executor (Spark hands a task to the
    idle worker first in line), and each such task then pays a new producer
    (``init_transactions`` and the marker read); the executor JVM keeps one per id for its
    life. ``java_kafka``: the connection as the Java client's ``kafka.*`` options
    (:meth:`.settings.Settings.kafka_options`); ``admin_kafka``: as librdkafka's, for
    creating the marker topic here, on the driver.
    """
    unit, batch_id = current_unit(role)
    partitions = ensure_marker_topic(admin_kafka, marker_topic)
    writer = _jvm_writer(rows.sparkSession)
    if writer is None:
        raise ConfigError(
            f"the JVM writer {JVM_WRITER} is not on the Spark class path: run `make setup` "
            "(it compiles jvm/operators into jvm/lib/operators)"
        )
    conf = {
        k.removeprefix("kafka."): str(v) for k, v in java_kafka.items() if k.startswith("kafka.")
    }
    out = []
    for line in writer.write(
        rows._jdf, conf, marker_topic, partitions, id_prefix(unit.query_id, role), batch_id
    ):
        records, _, counts = str(line).partition(" ")
        out.append((int(records), counts))
    return out


def _jvm_writer(spark: Any) -> Any:
    """The JVM writer's class through py4j, or None when it is not on the class path."""
    from py4j.java_gateway import JavaClass

    writer: Any = spark.sparkContext._jvm
    for part in JVM_WRITER.split("."):
        writer = getattr(writer, part)
    return writer if isinstance(writer, JavaClass) else None


def close_jvm_kept(spark: Any) -> int:
    """Close the transactional producers the driver's JVM keeps (the executor of a local
    master); how many (0 when the writer is not on the class path)."""
    writer = _jvm_writer(spark)
    return 0 if writer is None else int(writer.closeAll())


def jvm_writer_stats(spark: Any) -> dict[str, int]:
    """What the driver JVM's writer did since the JVM started (with a local master, every
    task's): producers ``opened`` and ``open_ms``, kept ones found fenced and ``replaced``,
    transactions ``committed`` and ``transaction_ms``, units ``skipped``."""
    writer = _jvm_writer(spark)
    return {} if writer is None else {str(k): int(v) for k, v in writer.stats().items()}


def kafka_reason(exc: BaseException) -> str:
    """The Kafka error behind ``exc``: a fenced producer's delivery callback may surface as
    a Python ``SystemError`` whose context holds the ``KafkaException`` that says why."""
    seen: BaseException | None = exc
    for _ in range(5):
        if seen is None:
            break
        if type(seen).__name__ == "KafkaException":
            return str(seen)
        seen = seen.__cause__ or seen.__context__
    return str(exc)


def write_transactional(
    kafka: Mapping[str, Any],
    batches: Iterator[Any],
    default_topic: str | None,
    unit: Unit,
    batch_id: int,
    produce_rows: Callable[[Any, Any, str | None, list[str]], int],
    marker_topic: str = MARKER_TOPIC,
) -> int:
    """Write Arrow batches of sink rows for ``unit`` in ONE transaction with its marker;
    records written (0 when the unit's batch was already committed, or had no rows).

    The marker goes first and is acknowledged before any row is taken from ``batches``: a
    kept producer fenced since its last use learns it there, and is replaced (once) by a new
    one, which reads the marker again. Any failure after that aborts the transaction, drops
    the producer and raises :class:`DeliveryError` (the task fails; its retry, or the
    replayed batch, starts over with the same id). ``produce_rows(producer, batch, topic,
    failures)`` hands one Arrow batch to the producer (the sink's).
    """
    first = next(batches, None)
    if first is None:
        return 0
    tid = unit.transactional_id
    for attempt in (0, 1):
        holder = take_producer(kafka, tid, marker_topic)
        if already_committed(batch_id, holder.committed):
            for _ in batches:  # run the task to its end: its other results still count
                pass
            keep_producer(kafka, holder)
            log.info("%s: batch %d already committed, skipped", tid, batch_id)
            return 0
        producer = holder.producer
        holder.failures = []
        try:
            producer.begin_transaction()
            partitions = ensure_marker_topic(kafka, marker_topic)
            producer.produce(
                marker_topic,
                marker_value(batch_id),
                tid.encode(),
                partition=marker_partition(tid, partitions),
            )
            if producer.flush(INIT_TIMEOUT_S) or holder.failures:
                raise DeliveryError(f"{tid}: marker not written: {'; '.join(holder.failures[:2])}")
        except Exception as exc:
            _abort(holder)
            _close(holder)
            if attempt == 0:
                log.info("%s: producer unusable (%s), opening a new one", tid, exc)
                continue
            raise DeliveryError(f"{tid}: cannot start a transaction: {exc}") from exc
        try:
            import itertools

            count = 0
            for batch in itertools.chain([first], batches):
                count += produce_rows(producer, batch, default_topic, holder.failures)
                if holder.failures:
                    break
            remaining = producer.flush(FLUSH_TIMEOUT_S)
            if holder.failures or remaining:
                why = "; ".join(holder.failures[:3]) or f"{remaining} record(s) unacknowledged"
                raise DeliveryError(f"{tid}: batch {batch_id} not delivered: {why}")
            producer.commit_transaction(INIT_TIMEOUT_S)
        except Exception as exc:
            _abort(holder)
            _close(holder)
            if isinstance(exc, DeliveryError):
                raise
            raise DeliveryError(
                f"{tid}: batch {batch_id} not committed: {kafka_reason(exc)}"
            ) from exc
        holder.committed = batch_id
        keep_producer(kafka, holder)
        return count
    raise AssertionError("unreachable")  # pragma: no cover
