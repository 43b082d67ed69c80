"""The ``streamscale-kafka`` streaming source: Spark's Kafka source in Python, over librdkafka.

Planning runs driver-side in one long-lived Python process (``initialOffset``,
``latestOffset``, ``partitions``, ``commit``); records are read on executors by ``read()``,
which makes its own consumer, reads exactly ``[start, end)`` of one range and returns Arrow
record batches. Spark's checkpoint is the source of truth for offsets; the processed offsets
of each committed batch are mirrored to a Kafka consumer group by
:class:`streamscale.kafka.commits.GroupCommitter`, for this source and Spark's alike.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from itertools import chain
from typing import Any

from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from streamscale.errors import KafkaRequestError
from streamscale.kafka.admin import KafkaAdmin, query_watermarks
from streamscale.kafka.collector import collector_paused
from streamscale.kafka.offsets import (
    OffsetError,
    OffsetRange,
    Offsets,
    TopicPartition,
    check_co_partitioned,
    co_partition,
    from_json,
    out_of_range,
    planned_data_loss,
    ranges,
    rate_limit,
    resolve_specific,
    split_ranges,
    to_json,
    tp_names,
)
from streamscale.kafka.options import SourceOptions, headers_arrow_type

log = logging.getLogger(__name__)

HEADERS_TYPE = ArrayType(
    StructType([StructField("key", StringType()), StructField("value", BinaryType())])
)


def source_schema(include_headers: bool = False) -> StructType:
    """The schema of Spark's own Kafka source."""
    fields = [
        StructField("key", BinaryType()),
        StructField("value", BinaryType()),
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
        StructField("timestamp", TimestampType()),
        StructField("timestampType", IntegerType()),
    ]
    if include_headers:
        fields.append(StructField("headers", HEADERS_TYPE))
    return StructType(fields)


class DataLossError(KafkaRequestError):
    """Offsets the query needs are gone or out of range, and ``failOnDataLoss`` is true."""


class KafkaInputPartition(InputPartition):  # type: ignore[misc]
    """One Spark task: records ``[start, end)`` of one Kafka partition."""

    def __init__(self, topic: str, partition: int, start: int, end: int) -> None:
        super().__init__((topic, partition, start, end))
        self.topic = topic
        self.partition = partition
        self.start = start
        self.end = end


class KafkaGroupPartition(InputPartition):  # type: ignore[misc]
    """One Spark task of a co-partitioned read: ranges of the same partition number of
    several topics, read one after the other."""

    def __init__(self, ranges: tuple[OffsetRange, ...]) -> None:
        super().__init__(tuple((r.topic, r.partition, r.start, r.end) for r in ranges))
        self.ranges = tuple(KafkaInputPartition(*r) for r in self.value)


ARROW_BATCH_ROWS = 20_000
# An unreachable cluster must fail the query within 30 s, naming the servers.
ADMIN_TIMEOUT_S = 20.0


class KafkaStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):  # type: ignore[misc]
    """Plans micro-batches over Kafka offsets and reads them on executors."""

    def __init__(self, options: SourceOptions, schema: StructType) -> None:
        self.options = options
        self.include_headers = options.include_headers
        self._admin: KafkaAdmin | None = None
        self._latest: Offsets | None = None
        self._trigger_available_now = False
        self._available_now: Offsets | None = None

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_admin"] = None  # clients never travel to executors
        return state

    # driver side ---------------------------------------------------------------------------
    @property
    def admin(self) -> KafkaAdmin:
        if self._admin is None:
            self._admin = KafkaAdmin(self.options.kafka, timeout_s=ADMIN_TIMEOUT_S)
        return self._admin

    def _partitions(self) -> list[TopicPartition]:
        o = self.options
        tps = self.admin.partitions(o.subscribe, o.subscribe_pattern, o.assign)
        if not tps and o.subscribe_pattern is not None:
            log.warning("subscribePattern %r matches no topic yet", o.subscribe_pattern)
        if o.co_partitioned:
            check_co_partitioned(tps)
        return tps

    def _report_data_loss(self, message: str) -> None:
        """Fail with ``message`` under ``failOnDataLoss`` (the default), else log it."""
        if self.options.fail_on_data_loss:
            raise DataLossError(
                f"{message} (set failOnDataLoss=false to go on from the available offsets)"
            )
        log.warning("%s: skipped (failOnDataLoss=false)", message)

    def initialOffset(self) -> dict[str, dict[str, int]]:
        tps = self._partitions()
        earliest = self.admin.earliest(tps)
        starting = self.options.starting
        if starting == "earliest":
            return to_json(earliest)
        latest = self.admin.end_offsets(tps)
        if starting == "latest":
            return to_json(latest)
        assert isinstance(starting, dict)
        try:
            offsets = resolve_specific(starting, tps, earliest, latest)
        except OffsetError as exc:
            raise OffsetError(f"startingOffsets: {exc}") from None
        # Out-of-range start offsets stay as given, as in Spark's connector: records below
        # the earliest are skipped when read, a start beyond the end offset gives an empty
        # range and the next batch goes on from the end offset. With failOnDataLoss, fail now.
        bad = out_of_range(offsets, earliest, latest)
        if bad:
            self._report_data_loss("; ".join(oor.message() for oor in bad))
        return to_json(offsets)

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.options.max_offsets_per_trigger is not None:
            return ReadMaxRows(self.options.max_offsets_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        # The end offsets are fetched by the first latestOffset (after initialOffset, as in
        # Spark's connector) and bound every batch of this run.
        self._trigger_available_now = True

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, dict[str, int]]:
        """The next batch's end: the end offsets (under Trigger.AvailableNow, those of the run's
        first batch), cut by ``maxOffsetsPerTrigger`` as Spark's connector cuts them. An end
        offset below its start is kept: :meth:`partitions` reports it as data loss."""
        current = from_json(start)
        if self._available_now is not None:
            latest = self._available_now
        else:
            latest = self.admin.end_offsets(self._partitions())
            if self._trigger_available_now:
                self._available_now = latest
        self._latest = latest
        max_rows = limit.max_rows if isinstance(limit, ReadMaxRows) else None
        if max_rows is None:
            return to_json(latest)
        new = [tp for tp in latest if tp not in current]
        if new:
            log.info("new partitions %s start at their earliest offset", tp_names(new))
            current.update(self.admin.earliest(new))
        return to_json(rate_limit(current, latest, max_rows))

    def reportLatestOffset(self) -> dict[str, dict[str, int]] | None:
        return to_json(self._latest) if self._latest is not None else None

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[InputPartition]:
        begin = from_json(start)
        until = from_json(end)
        added = self.admin.earliest([tp for tp in until if tp not in begin])
        for message in planned_data_loss(begin, until, added):
            self._report_data_loss(message)
        begin.update(added)
        if self.options.co_partitioned:
            groups = co_partition(ranges(begin, until), self.options.min_partitions)
            return [KafkaGroupPartition(group) for group in groups]
        planned = split_ranges(ranges(begin, until), self.options.min_partitions)
        return [KafkaInputPartition(r.topic, r.partition, r.start, r.end) for r in planned]

    def commit(self, end: dict[str, Any]) -> None:
        """Nothing to release; the consumer group is committed by the session's listener."""

    def stop(self) -> None:
        if self._admin is not None:
            self._admin.close()
            self._admin = None

    # executor side -------------------------------------------------------------------------
    def read(self, partition: InputPartition) -> Iterator[Any]:
        """Read ``[start, end)`` of one partition (or of each of a group) as Arrow batches."""
        if isinstance(partition, KafkaGroupPartition):
            for part in partition.ranges:
                yield from read_range(self.options, part, self.include_headers)
            return
        assert isinstance(partition, KafkaInputPartition)
        yield from read_range(self.options, partition, self.include_headers)


def arrow_batch(messages: list[Any], topic: str, partition: int, include_headers: bool) -> Any:
    """One Arrow record batch in the source schema from error-free messages of one partition.

    Fields are pulled with ``map`` over the C methods (no Python frame per record) and the
    timestamps go through one NumPy array instead of a list per column.
    """
    import numpy as np
    import pyarrow as pa
    from confluent_kafka import Message

    n = len(messages)
    stamps = np.fromiter(
        chain.from_iterable(map(Message.timestamp, messages)), np.int64, count=2 * n
    ).reshape(n, 2)
    # librdkafka's timestamp types (0 none, 1 create, 2 log append) → Kafka's (-1, 0, 1).
    types = stamps[:, 0].astype(np.int32) - 1
    types[(types < -1) | (types > 1)] = -1
    arrays = [
        pa.array(list(map(Message.key, messages)), pa.binary()),
        pa.array(list(map(Message.value, messages)), pa.binary()),
        pa.repeat(pa.scalar(topic, pa.string()), n),
        pa.repeat(pa.scalar(partition, pa.int32()), n),
        pa.array(list(map(Message.offset, messages)), pa.int64()),
        pa.array(stamps[:, 1] * 1000, pa.timestamp("us", tz="UTC")),
        pa.array(types, pa.int32()),
    ]
    if include_headers:
        # A record without headers has a null ``headers`` (not an empty array), as in Spark.
        headers = [
            [{"key": k, "value": v} for k, v in hs] if (hs := m.headers()) else None
            for m in messages
        ]
        header_type = headers_arrow_type()
        arrays.append(pa.array(headers, header_type))
    return pa.RecordBatch.from_arrays(arrays, names=source_schema(include_headers).names)


def read_range(
    options: SourceOptions, part: KafkaInputPartition, include_headers: bool
) -> Iterator[Any]:
    """Consume exactly the offsets ``[part.start, part.end)``; fail loudly on loss."""
    if part.end <= part.start:
        return
    with collector_paused():
        yield from _read_range(options, part, include_headers)


def _read_range(
    options: SourceOptions, part: KafkaInputPartition, include_headers: bool
) -> Iterator[Any]:
    from confluent_kafka import Consumer, KafkaError, Message
    from confluent_kafka import TopicPartition as CTP

    consumer = Consumer(
        {
            **options.kafka,
            "group.id": f"{options.group_id}-executor",
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "auto.offset.reset": "error",
            "enable.partition.eof": True,
            "fetch.wait.max.ms": 50,
            "queued.min.messages": 100_000,
            # librdkafka pauses a partition's fetching 1 s once its queue is full: a reader
            # draining 200k records/s would then idle; resume as soon as there is room.
            "fetch.queue.backoff.ms": 10,
        }
    )
    topic, pid, end = part.topic, part.partition, part.end
    try:
        consumer.assign([CTP(topic, pid, part.start)])
        pending: list[Any] = []
        position = part.start
        deadline = time.monotonic() + options.poll_timeout_s
        done = False
        while not done:
            msgs = consumer.consume(num_messages=min(10_000, end - position + 1), timeout=1.0)
            if not msgs:
                if time.monotonic() > deadline:
                    raise KafkaRequestError(
                        f"no records from {topic}-{pid} at offset {position} (reading up to "
                        f"{end}) within {options.poll_timeout_s:.0f} s from {options.servers}"
                    )
                continue
            deadline = time.monotonic() + options.poll_timeout_s
            last = msgs[-1]
            # ``is None``, not ``==``: comparing a KafkaError with None raises a SystemError
            if last.offset() < end and all(e is None for e in map(Message.error, msgs)):
                pending.extend(msgs)  # the common case: records only, all inside the range
                position = last.offset() + 1
                done = position >= end
            else:
                for msg in msgs:
                    err = msg.error()
                    if err is None:
                        if msg.offset() >= end:
                            done = True
                            break
                        pending.append(msg)
                        position = msg.offset() + 1
                        if position >= end:
                            done = True
                            break
                        continue
                    if err.code() == KafkaError._PARTITION_EOF:
                        if msg.offset() < end:
                            _data_loss(
                                options,
                                f"topic {topic} partition {pid} ends at offset {msg.offset()} "
                                f"but offsets up to {end} were planned",
                            )
                        done = True
                        break
                    if err.code() in (
                        KafkaError._AUTO_OFFSET_RESET,
                        KafkaError.OFFSET_OUT_OF_RANGE,
                    ):
                        low, _ = query_watermarks(consumer, topic, pid, options.poll_timeout_s)
                        _data_loss(
                            options,
                            f"offset out of range on topic {topic} partition {pid}: offsets "
                            f"{position}..{min(low, end) - 1} are no longer available",
                        )
                        position = max(position, low)
                        done = position >= end
                        if not done:
                            # after a reset error the partition refuses seek(): assign anew
                            consumer.unassign()
                            consumer.assign([CTP(topic, pid, position)])
                        break
                    raise KafkaRequestError(f"Kafka error reading {topic}-{pid}: {err.str()}")
            if len(pending) >= ARROW_BATCH_ROWS or (done and pending):
                yield arrow_batch(pending, topic, pid, include_headers)
                pending = []
    finally:
        consumer.close()


def _data_loss(options: SourceOptions, message: str) -> None:
    if options.fail_on_data_loss:
        raise DataLossError(message + " (set failOnDataLoss=false to skip)")
    log.warning("%s: skipped (failOnDataLoss=false)", message)
