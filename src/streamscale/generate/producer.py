"""The produce loop of the load generators: paced, bounded, and loud about failures.

Records come from a pure builder; this module checks that the broker answers and the topics
exist, produces them at the pace of a :class:`~streamscale.generate.profiles.Schedule`, and
returns only once every record is acknowledged. Delivery reports are requested for failures
only (``delivery.report.only.error``: a callback per success would cost a third of the
throughput), and records without an event timestamp go out through ``produce_batch``; any
failure, or a record still unacknowledged when the flush deadline passes,
raises :class:`~streamscale.kafka.client.DeliveryError` — nothing is dropped silently.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Producer
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)

from streamscale.errors import KafkaRequestError
from streamscale.generate import Record
from streamscale.generate.profiles import Schedule
from streamscale.kafka.client import DeliveryError, producer_config
from streamscale.settings import Settings

POLL_EVERY = 4096  # records between two poll(0) calls (serve delivery reports)
BATCH_SIZE = 1000  # records per produce_batch call
PROGRESS_EVERY_S = 0.2
MAX_WAIT_S = 0.05  # longest sleep while ahead of the schedule
PACE_TICK_S = 0.01
"""Ahead of the schedule, the loop sleeps until a record is this far past due and then sends
every record due: one wake per tick, not per record (a wake per record spun about one core
whatever the rate: 197 µs of CPU per record at 5,000 records/s against 37 with ticks, start
included; docs/sustainable.md), no record early, none more than a tick late (event times are
the schedule's, not the send time)."""
QUEUE_FULL_LIMIT_S = 60.0  # the local queue stays full this long: the broker is gone

# librdkafka logs (connection refused...) go to Python logging, silent unless configured:
# errors reach the user as exceptions with one clear line instead.
_LIBRDKAFKA_LOG = logging.getLogger("streamscale.generate.librdkafka")
_LIBRDKAFKA_LOG.addHandler(logging.NullHandler())


class GenerateError(KafkaRequestError):
    """The broker cannot be reached, a topic is missing, or it would delete the records at
    once (older than its retention): nothing was produced."""


DAY_MS = 86_400_000


def retention_problem(
    topic: str, config: Mapping[str, str], oldest_ms: int, now_ms: int
) -> str | None:
    """Why records stamped from ``oldest_ms`` on would not stay in ``topic`` (its
    ``cleanup.policy`` deletes, and they are older than its ``retention.ms``), or None."""
    if "delete" not in config.get("cleanup.policy", "delete").split(","):
        return None  # compacted only: kept whatever their age
    retention_ms = int(config.get("retention.ms", "-1"))
    if retention_ms < 0 or oldest_ms >= now_ms - retention_ms:
        return None
    when = datetime.fromtimestamp(oldest_ms / 1000, UTC).strftime("%Y-%m-%d %H:%M UTC")
    return (
        f"records stamped from {when} are {(now_ms - oldest_ms) / DAY_MS:.1f} days old, older "
        f"than {topic} keeps records (retention.ms={retention_ms}, "
        f"{retention_ms / DAY_MS:g} days): the broker would delete them at once; start later "
        "(--start-ms) or raise the topic's retention.ms"
    )


def check_retention(
    settings: Settings, topics: Sequence[str], oldest_ms: int, timeout_s: float
) -> None:
    """:class:`GenerateError` if a topic would delete records stamped from ``oldest_ms`` on
    as soon as they arrive (read from the topic's configuration on the broker)."""
    from streamscale.kafka.admin import KafkaAdmin

    admin = KafkaAdmin(settings.kafka_config(), timeout_s=timeout_s)
    try:
        now_ms = int(time.time() * 1000)
        for topic in topics:
            problem = retention_problem(topic, admin.topic_config(topic), oldest_ms, now_ms)
            if problem is not None:
                raise GenerateError(problem)
    finally:
        admin.close()


@dataclass(frozen=True)
class ProduceStats:
    """What a run delivered: counted records (the units of ``--count``), all records."""

    counted: int
    records: int
    seconds: float

    @property
    def rate(self) -> float:
        """Achieved counted records per second."""
        return self.counted / self.seconds if self.seconds > 0 else 0.0


class _Failures:
    """Delivery callback target: counts failed records and keeps the first error."""

    def __init__(self) -> None:
        self.count = 0
        self.first: str | None = None

    def __call__(self, err: KafkaError | None, msg: Any) -> None:
        if err is None:
            return
        self.count += 1
        if self.first is None:
            self.first = f"{err.str()} (topic {msg.topic()})"


UNKNOWN_TOPIC_GRACE_S = 3.0
"""How long a topic missing from the metadata is asked for again: a broker learns a new topic
(or, just restarted, the cluster's topics) a moment after the controller has created it."""


def check_topics(
    producer: Producer,
    topics: Sequence[str],
    bootstrap: str,
    timeout_s: float,
    grace_s: float = UNKNOWN_TOPIC_GRACE_S,
) -> None:
    """Raise :class:`GenerateError` unless the broker answers and every topic exists."""
    deadline = time.monotonic() + grace_s
    while True:
        try:
            metadata = producer.list_topics(timeout=timeout_s)
        except KafkaException as exc:
            err = exc.args[0] if exc.args else exc
            detail = err.str() if isinstance(err, KafkaError) else str(err)
            raise GenerateError(
                f"cannot reach Kafka at {bootstrap} within {timeout_s:g} s ({detail})"
            ) from None
        missing = [
            topic
            for topic in topics
            if (found := metadata.topics.get(topic)) is None or found.error is not None
        ]
        if not missing:
            return
        if time.monotonic() >= deadline:
            raise GenerateError(
                f"topic {missing[0]!r} does not exist on {bootstrap}: "
                "create it first (streamscale topics apply)"
            )
        time.sleep(0.2)


def _progress(enabled: bool | None, label: str, total: int) -> tuple[Progress | None, TaskID]:
    console = Console(stderr=True)
    if enabled is None:
        enabled = console.is_terminal
    if not enabled:
        return None, TaskID(0)
    progress = Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[rate]:>10,.0f} rec/s"),
        TimeElapsedColumn(),
        console=console,
        transient=False,
    )
    task = progress.add_task(label, total=total, rate=0.0)
    progress.start()
    return progress, task


def produce(
    settings: Settings,
    records: Iterable[Record],
    schedule: Schedule,
    topics: Sequence[str],
    *,
    label: str = "records",
    progress: bool | None = None,
    metadata_timeout_s: float | None = None,
    flush_timeout_s: float | None = None,
    overrides: Mapping[str, Any] | None = None,
    oldest_ms: int | None = None,
) -> ProduceStats:
    """Produce ``records`` paced by ``schedule``; return once all are acknowledged.

    ``topics`` are checked first (:class:`GenerateError` if the broker does not answer within
    ``metadata_timeout_s``, default ``min(settings.request_timeout_s, 20)``, or a topic is
    missing), and with ``oldest_ms`` (the event time of the oldest record) against each
    topic's retention (:func:`check_retention`). Raises :class:`DeliveryError` if any record
    failed or is still unacknowledged after ``flush_timeout_s`` (default: the producer's
    delivery timeout plus 10 s).
    ``progress`` None shows the bar only on a terminal.
    """
    failures = _Failures()
    conf = producer_config(
        settings.kafka_config(),
        **{
            "delivery.report.only.error": True,
            "on_delivery": failures,
            "logger": _LIBRDKAFKA_LOG,
            "queue.buffering.max.messages": 500_000,
            **(overrides or {}),
        },
    )
    bootstrap = settings.bootstrap_servers
    if metadata_timeout_s is None:
        metadata_timeout_s = min(settings.request_timeout_s, 20.0)
    if flush_timeout_s is None:
        flush_timeout_s = int(conf["delivery.timeout.ms"]) / 1000.0 + 10.0
    producer = Producer(conf)
    check_topics(producer, topics, bootstrap, metadata_timeout_s)
    if oldest_ms is not None:
        check_retention(settings, topics, oldest_ms, metadata_timeout_s)

    bar, task = _progress(progress, label, schedule.total)
    sender = _Sender(producer, int(conf["queue.buffering.max.messages"]), bootstrap)
    send_one, add, flush_batch = sender.one, sender.add, sender.flush_batch
    poll = producer.poll
    due, release_wait = schedule.due, schedule.release_wait
    clock = time.monotonic
    counted = 0
    produced = 0
    start = clock()
    allowed = due(0.0)
    next_progress = start + PROGRESS_EVERY_S

    def show(now: float) -> None:
        if bar is not None:
            elapsed = now - start
            bar.update(task, completed=counted, rate=counted / elapsed if elapsed > 0 else 0.0)

    try:
        for topic, key, value, timestamp, is_counted in records:
            if is_counted:
                if counted >= allowed:
                    flush_batch()
                while counted >= allowed:  # ahead of the schedule: wait, serving callbacks
                    now = clock()
                    wait = release_wait(counted, now - start, PACE_TICK_S)
                    if wait <= 0.0:  # a tick past due: send all that is due now
                        allowed = due(now - start)
                        break
                    if now >= next_progress:
                        show(now)
                        next_progress = now + PROGRESS_EVERY_S
                    poll(min(wait, MAX_WAIT_S))
                counted += 1
            if timestamp:
                send_one(topic, key, value, timestamp)
            else:
                add(topic, key, value)
            produced += 1
            if produced % POLL_EVERY == 0:
                poll(0)
                now = clock()
                if now >= next_progress:
                    show(now)
                    next_progress = now + PROGRESS_EVERY_S
        flush_batch()
        try:
            _flush(producer, flush_timeout_s, produced, bootstrap)
        except DeliveryError as exc:
            raise DeliveryError(
                _with_diagnosis(str(exc), settings.kafka_config(), topics)
            ) from None
        seconds = clock() - start
        show(clock())
    finally:
        if bar is not None:
            bar.stop()
    if failures.count:
        raise DeliveryError(
            _with_diagnosis(
                f"{failures.count} of {produced} records were not delivered to {bootstrap}: "
                f"{failures.first}",
                settings.kafka_config(),
                topics,
            )
        )
    return ProduceStats(counted=counted, records=produced, seconds=seconds)


class _Sender:
    """Hands records to librdkafka: one by one when they carry a timestamp, else in batches.

    ``produce_batch`` costs about a third of ``produce`` per record but cannot set
    timestamps. Consecutive records for one topic without a timestamp are batched; a batch
    goes out only when the local queue has room for all of it, so that no record of it is
    refused and retried out of order (a rename overtaking its product's first value).
    """

    def __init__(self, producer: Producer, queue_limit: int, bootstrap: str) -> None:
        self.producer = producer
        self.queue_limit = queue_limit
        self.bootstrap = bootstrap
        self.batch: list[dict[str, str | None]] = []
        self.batch_topic = ""

    def add(self, topic: str, key: str | None, value: str | None) -> None:
        if topic != self.batch_topic:
            self.flush_batch()
            self.batch_topic = topic
        self.batch.append({"key": key, "value": value})
        if len(self.batch) >= BATCH_SIZE:
            self.flush_batch()

    def flush_batch(self) -> None:
        batch = self.batch
        if not batch:
            return
        self._wait_for_room(len(batch))
        try:
            queued = self.producer.produce_batch(self.batch_topic, batch)
        except (BufferError, KafkaException) as exc:
            raise DeliveryError(
                f"cannot produce to {self.batch_topic!r} on {self.bootstrap}: {exc}"
            ) from None
        if queued != len(batch):
            error = next((m["_error"] for m in batch if "_error" in m), "unknown error")
            raise DeliveryError(
                f"{len(batch) - queued} records refused by the producer for "
                f"{self.batch_topic!r} on {self.bootstrap}: {error}"
            )
        self.batch = []

    def one(self, topic: str, key: str | None, value: str | None, timestamp: int) -> None:
        if self.batch:
            self.flush_batch()
        deadline = time.monotonic() + QUEUE_FULL_LIMIT_S
        while True:
            try:
                self.producer.produce(topic, value, key, timestamp=timestamp)
                return
            except BufferError:  # local queue full: serve callbacks and retry, bounded
                if time.monotonic() > deadline:
                    raise self._queue_full() from None
                self.producer.poll(0.01)
            except KafkaException as exc:
                raise DeliveryError(
                    f"cannot produce to {topic!r} on {self.bootstrap}: {exc}"
                ) from None

    def _queue_full(self) -> DeliveryError:
        return DeliveryError(
            f"the local produce queue stayed full for {QUEUE_FULL_LIMIT_S:g} s: "
            f"{self.bootstrap} does not take records"
        )

    def _wait_for_room(self, records: int) -> None:
        """Serve callbacks until ``records`` more fit in the local queue; bounded."""
        producer = self.producer
        deadline = time.monotonic() + QUEUE_FULL_LIMIT_S
        while len(producer) + records > self.queue_limit:
            producer.poll(0.01)
            if time.monotonic() > deadline:
                raise self._queue_full()


def _with_diagnosis(message: str, conf: Mapping[str, Any], topics: Sequence[str]) -> str:
    """``message`` and, when the cluster cannot take ``acks=all`` writes to ``topics`` now,
    why (librdkafka's own error after its retries is only "Message timed out"); one line."""
    from streamscale.kafka.admin import explain_unacknowledged
    from streamscale.kafka.refusals import explain

    refused = explain(message, user=conf.get("sasl.username"), topics=topics)
    if refused is not None:
        return refused
    why = explain_unacknowledged(conf, topics)
    return message if why is None else f"{why}: {message}"


def _flush(producer: Producer, timeout_s: float, produced: int, bootstrap: str) -> None:
    """Wait for every acknowledgement; DeliveryError if some are missing at the deadline."""
    remaining = producer.flush(timeout_s)
    if remaining:
        raise DeliveryError(
            f"{remaining} of {produced} records still unacknowledged by {bootstrap} "
            f"after {timeout_s:g} s"
        )
