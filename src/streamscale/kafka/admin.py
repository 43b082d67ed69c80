"""Kafka metadata and offsets: topic specs applied without loss, true end offsets, groups.

:class:`KafkaAdmin` is the one I/O edge for cluster metadata. It is long-lived (the source's
driver side keeps one) and cheap to create; clients are made on first use.
"""

from __future__ import annotations

import logging
import re
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from streamscale.errors import CertificateError, ConfigError, KafkaRequestError
from streamscale.errors import UnknownTopicError as UnknownTopicError  # re-exported
from streamscale.errors import UnreachableError as UnreachableError  # re-exported
from streamscale.kafka.offsets import Offsets, TopicPartition

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class TopicSpec:
    """A topic as it should be. ``None`` replication factor means min(3, brokers)."""

    name: str
    partitions: int = 1
    replication_factor: int | None = None
    table: bool = False
    retention_ms: int | None = 7 * 24 * 3600 * 1000
    configs: Mapping[str, str] = field(default_factory=dict)

    def resolved(self, brokers: int) -> tuple[int, dict[str, str]]:
        """Replication factor and configs for a cluster of ``brokers`` brokers."""
        rf = self.replication_factor or min(3, brokers)
        configs = {"min.insync.replicas": str(min(2, rf))}
        if self.table:
            configs["cleanup.policy"] = "compact"
            configs["retention.ms"] = "-1"
        else:
            configs["cleanup.policy"] = "delete"
            if self.retention_ms is not None:
                configs["retention.ms"] = str(self.retention_ms)
        configs["retention.bytes"] = "-1"
        configs.update(self.configs)
        return rf, configs


def _one_per_name(specs: Iterable[TopicSpec]) -> list[TopicSpec]:
    """Specs listed more than once (a topic two pipelines share) kept once; two different
    specs of one name are a configuration error."""
    kept: dict[str, TopicSpec] = {}
    for spec in specs:
        first = kept.setdefault(spec.name, spec)
        if first != spec:
            raise ConfigError(
                f"topic {spec.name} is specified twice, differently: {first} and {spec}"
            )
    return list(kept.values())


@dataclass
class ApplyReport:
    """What ``apply`` did and found: created topics, drift (never altered), warnings."""

    created: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    drift: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


class KafkaAdmin:
    """Metadata, offsets and consumer-group commits against one cluster.

    ``conf`` holds librdkafka connection keys (``bootstrap.servers``, security...).
    """

    def __init__(self, conf: Mapping[str, Any], timeout_s: float = 30.0) -> None:
        self.conf = dict(conf)
        self.timeout_s = timeout_s
        self._admin: Any = None
        self._consumer: Any = None
        self._group_consumers: dict[str, Any] = {}
        self._client_errors: list[str] = []

    @property
    def servers(self) -> str:
        return str(self.conf.get("bootstrap.servers", "?"))

    # clients -------------------------------------------------------------------------------
    def _admin_client(self) -> Any:
        if self._admin is None:
            from confluent_kafka.admin import AdminClient

            conf = dict(self.conf)
            conf.setdefault("error_cb", self._client_errors_cb)
            self._admin = AdminClient(conf)
        return self._admin

    def _client_errors_cb(self, err: Any) -> None:
        """Errors librdkafka reports on its own (a refused login, a failed TLS handshake):
        kept so that a request that then times out says why (:meth:`metadata`)."""
        if len(self._client_errors) < 20:
            self._client_errors.append(str(err))

    def _offsets_consumer(self) -> Any:
        if self._consumer is None:
            from confluent_kafka import Consumer

            self._consumer = Consumer(
                {
                    **self.conf,
                    "group.id": f"streamscale-offsets-{uuid.uuid4().hex[:8]}",
                    "enable.auto.commit": False,
                    "enable.partition.eof": True,
                    "auto.offset.reset": "earliest",
                    "fetch.wait.max.ms": 10,
                    "max.partition.fetch.bytes": 1048576,
                    "queued.min.messages": 1,
                    "fetch.queue.backoff.ms": 0,
                }
            )
        return self._consumer

    def close(self) -> None:
        for consumer in [self._consumer, *self._group_consumers.values()]:
            if consumer is not None:
                consumer.close()
        self._consumer = None
        self._group_consumers.clear()
        self._admin = None

    # metadata ------------------------------------------------------------------------------
    def metadata(self, topic: str | None = None) -> Any:
        """Cluster metadata; :class:`UnreachableError` naming the servers if none answers."""
        from confluent_kafka import KafkaException

        try:
            return self._admin_client().list_topics(topic=topic, timeout=self.timeout_s)
        except KafkaException as exc:
            from streamscale.kafka.refusals import refusal

            self._admin_client().poll(0)  # serves the error callback
            text = " ".join([str(exc), *self._client_errors])
            why = refusal(text, user=self.conf.get("sasl.username"))
            if isinstance(why, CertificateError):  # librdkafka does not say what failed
                from streamscale.kafka.security import tls_problem

                problem = tls_problem(self.servers, self.conf.get("ssl.ca.location"))
                why = (refusal(problem) if problem else None) or why
            if why is not None:
                raise why from None
            raise UnreachableError(
                f"cannot reach Kafka at {self.servers} within {self.timeout_s:.0f} s: "
                f"{exc.args[0].str() if exc.args else exc}"
            ) from None

    def brokers(self) -> int:
        return len(self.metadata().brokers)

    def topics(self) -> dict[str, int]:
        """Existing topics (internal ones excluded) and their partition counts."""
        md = self.metadata()
        return {
            name: len(t.partitions)
            for name, t in md.topics.items()
            if t.error is None and not name.startswith("__")
        }

    def partitions(
        self,
        subscribe: Sequence[str] = (),
        pattern: str | None = None,
        assign: Sequence[TopicPartition] = (),
    ) -> list[TopicPartition]:
        """The partitions a source reads: of subscribed topics, matching topics, or assigned."""
        existing = self.topics()
        if assign:
            missing = sorted({tp.topic for tp in assign} - set(existing))
            if missing:
                raise UnknownTopicError(
                    f"assigned topics do not exist on {self.servers}: {missing}"
                )
            for tp in assign:
                if tp.partition >= existing[tp.topic]:
                    raise UnknownTopicError(
                        f"topic {tp.topic} has {existing[tp.topic]} partitions: "
                        f"partition {tp.partition} does not exist"
                    )
            return sorted(assign)
        if pattern is not None:
            regex = re.compile(pattern)
            names = sorted(t for t in existing if regex.fullmatch(t))
        else:
            missing = sorted(set(subscribe) - set(existing))
            if missing:
                raise UnknownTopicError(
                    f"subscribed topic(s) {', '.join(missing)} do not exist on {self.servers}: "
                    "create them (streamscale topics apply) or fix `subscribe`"
                )
            names = sorted(set(subscribe))
        return [TopicPartition(t, p) for t in names for p in range(existing[t])]

    # offsets -------------------------------------------------------------------------------
    def _watermarks(self, tps: Iterable[TopicPartition]) -> dict[TopicPartition, tuple[int, int]]:
        consumer = self._offsets_consumer()
        out = {}
        for tp in tps:
            try:
                out[tp] = query_watermarks(consumer, tp.topic, tp.partition, self.timeout_s)
            except KafkaRequestError as exc:
                raise KafkaRequestError(f"{exc} (on {self.servers})") from None
        return out

    def earliest(self, tps: Iterable[TopicPartition]) -> Offsets:
        """First available offset of each partition (log start offset)."""
        return {tp: low for tp, (low, _) in self._watermarks(tps).items()}

    def end_offsets(self, tps: Iterable[TopicPartition]) -> Offsets:
        """High watermark of each partition (the offset the next record will get; ListOffsets
        "latest" under read_uncommitted, as Spark's connector reads it)."""
        return {tp: high for tp, (_, high) in self._watermarks(tps).items()}

    def read_all(
        self, topic: str, partitions: int | None = None, isolation: str | None = None
    ) -> list[Any]:
        """Every record of ``topic`` up to each partition's end offset taken now (librdkafka
        messages, in arrival order); :class:`KafkaRequestError` if a partition cannot be read
        to its end within the timeout.

        ``isolation``: ``read_committed`` (the default, librdkafka's) or ``read_uncommitted``.
        Reading to each end offset, not counting records, is right also where offsets are not
        records: transactions' control records, compaction, retention."""
        return list(self.iter_all(topic, partitions, isolation))

    def iter_all(
        self,
        topic: str,
        partitions: int | None = None,
        isolation: str | None = None,
        *,
        start: Mapping[int, int] | None = None,
        end: Mapping[int, int] | None = None,
    ) -> Iterator[Any]:
        """:meth:`read_all` one message at a time, for a topic too big to hold whole (the
        demo's reference reads its inputs so); the :class:`KafkaRequestError` of a partition
        not read to its end comes after the messages read. The timeout counts the time spent
        waiting for the broker, not the time the caller spends on each message.

        ``start`` and ``end`` (partition -> offset; default 0 and the end offsets taken now)
        read a range instead: the records from ``start`` up to, not including, ``end``."""
        from confluent_kafka import Consumer, KafkaError
        from confluent_kafka import TopicPartition as CTP

        isolation = isolation or "read_committed"
        count = self.topics()[topic] if partitions is None else partitions
        if end is None:
            ends = self.end_offsets([TopicPartition(topic, p) for p in range(count)])
        else:
            ends = {TopicPartition(topic, p): end.get(p, 0) for p in range(count)}
        starts = {p: (start or {}).get(p, 0) for p in range(count)}
        consumer = Consumer(
            {**self.conf, "group.id": f"streamscale-read-{uuid.uuid4().hex[:8]}"}
            | {
                "enable.auto.commit": False,
                "fetch.queue.backoff.ms": 10,
                "isolation.level": isolation,
                "enable.partition.eof": True,
            }
        )
        waiting = {p for p in range(count) if ends.get(TopicPartition(topic, p), 0) > starts[p]}
        try:
            consumer.assign([CTP(topic, p, starts[p]) for p in waiting])
            waited, budget = 0.0, self.timeout_s * 4  # time in the consumer, not the caller's
            while waiting and waited < budget:
                began = time.monotonic()
                messages = consumer.consume(10_000, 0.5)
                waited += time.monotonic() - began
                for msg in messages:
                    err = msg.error()
                    if err is not None and err.code() == KafkaError._PARTITION_EOF:
                        if msg.offset() >= ends.get(TopicPartition(topic, msg.partition()), 0):
                            waiting.discard(msg.partition())
                        continue
                    if err is not None:
                        raise KafkaRequestError(f"reading {topic}: {err.str()}")
                    last = ends[TopicPartition(topic, msg.partition())] - 1
                    if end is not None and msg.offset() > last:
                        waiting.discard(msg.partition())  # past the range's end
                        continue
                    yield msg
                    if end is not None and msg.offset() == last:
                        waiting.discard(msg.partition())
        finally:
            consumer.close()
        if waiting:
            raise KafkaRequestError(
                f"could not read {topic} to its end ({isolation}) within the timeout: "
                f"partitions {sorted(waiting)} (an open transaction holds them back?)"
            )

    # consumer groups -----------------------------------------------------------------------
    def _group_consumer(self, group: str) -> Any:
        if group not in self._group_consumers:
            from confluent_kafka import Consumer

            self._group_consumers[group] = Consumer(
                {**self.conf, "group.id": group, "enable.auto.commit": False}
            )
        return self._group_consumers[group]

    def commit(self, group: str, offsets: Mapping[TopicPartition, int]) -> None:
        """Commit ``offsets`` (next to read) for ``group`` without joining it."""
        from confluent_kafka import KafkaException
        from confluent_kafka import TopicPartition as CTP

        if not offsets:
            return
        try:
            self._group_consumer(group).commit(
                offsets=[CTP(tp.topic, tp.partition, off) for tp, off in sorted(offsets.items())],
                asynchronous=False,
            )
        except KafkaException as exc:
            raise KafkaRequestError(f"cannot commit offsets of group {group}: {exc}") from None

    def committed(self, group: str, tps: Iterable[TopicPartition]) -> Offsets:
        """Committed offsets of ``group`` (partitions with no commit are left out)."""
        from confluent_kafka import TopicPartition as CTP

        result = self._group_consumer(group).committed(
            [CTP(tp.topic, tp.partition) for tp in tps], timeout=self.timeout_s
        )
        return {TopicPartition(r.topic, r.partition): r.offset for r in result if r.offset >= 0}

    # topics --------------------------------------------------------------------------------
    def topic_config(self, topic: str) -> dict[str, str]:
        """The topic's configuration as the broker reports it (its own settings and the
        broker's defaults): ``{"retention.ms": "604800000", ...}``."""
        from confluent_kafka.admin import ConfigResource

        resource = ConfigResource("topic", topic)
        try:
            found = (
                self._admin_client()
                .describe_configs([resource])[resource]
                .result(timeout=self.timeout_s)
            )
        except Exception as exc:
            raise KafkaRequestError(
                f"cannot read the configuration of topic {topic} on {self.servers}: {exc}"
            ) from None
        return {key: entry.value for key, entry in found.items() if entry.value is not None}

    def apply(self, specs: Iterable[TopicSpec]) -> ApplyReport:
        """Create missing topics; report drift of existing ones. Never deletes or alters."""
        from confluent_kafka.admin import NewTopic

        report = ApplyReport()
        md = self.metadata()
        brokers = len(md.brokers)
        specs = _one_per_name(specs)
        to_create = []
        reduced: list[str] = []
        for spec in specs:
            rf, configs = spec.resolved(brokers)
            if spec.replication_factor is None and rf < 3:
                reduced.append(spec.name)
            if spec.replication_factor is not None and spec.replication_factor > brokers:
                report.warnings.append(
                    f"{spec.name}: replication factor {spec.replication_factor} exceeds the "
                    f"{brokers} broker(s) of the cluster; real Kafka refuses it"
                )
            existing = md.topics.get(spec.name)
            if existing is None or existing.error is not None:
                to_create.append(NewTopic(spec.name, spec.partitions, rf, config=configs))
                continue
            found = len(existing.partitions)
            if found != spec.partitions:
                report.drift.append(f"{spec.name}: {found} partitions, spec says {spec.partitions}")
            replicas = {len(p.replicas) for p in existing.partitions.values()}
            if replicas and replicas != {rf}:
                report.drift.append(
                    f"{spec.name}: replication factor {sorted(replicas)}, spec says {rf}"
                )
            actual = self.topic_config(spec.name)
            for key, want in configs.items():
                got = actual.get(key)
                if got is None:
                    report.drift.append(
                        f"{spec.name}: {key} not reported by the broker, spec says {want}"
                    )
                elif got != want:
                    report.drift.append(f"{spec.name}: {key}={got}, spec says {want}")
            if not any(d.startswith(f"{spec.name}:") for d in report.drift):
                report.unchanged.append(spec.name)
        if reduced:
            report.warnings.append(
                f"the cluster has {brokers} broker(s): replication factor "
                f"{min(3, brokers)} and min.insync.replicas {min(2, brokers)} instead of 3 and 2 "
                f"for {', '.join(reduced)} (no redundancy: fine for a local run only)"
            )
        if to_create:
            futures = self._admin_client().create_topics(
                to_create, operation_timeout=self.timeout_s
            )
            for name, future in futures.items():
                try:
                    future.result(timeout=self.timeout_s)
                except Exception as exc:
                    raise KafkaRequestError(f"cannot create topic {name}: {exc}") from None
                report.created.append(name)
            self.wait_for_topics(report.created)
        return report

    def wait_for_topics(self, names: Sequence[str]) -> dict[str, int]:
        """Until every topic of ``names`` is in the metadata with a leader for each partition;
        their partition counts, as that metadata gives them.

        Creation is acknowledged by the controller before every broker's metadata has the
        topic; a client that produces or lists offsets right away would find it unknown. A
        broker lost or restarted does the same to a topic that exists: until a new leader is
        elected, the topic shows in the metadata with an error or a partition without one.
        """
        deadline = time.monotonic() + self.timeout_s
        waiting = set(names)
        ready: dict[str, int] = {}
        while waiting:
            md = self.metadata()
            for name in list(waiting):
                found = md.topics.get(name)
                if (
                    found is not None
                    and found.error is None
                    and found.partitions
                    and all(p.leader >= 0 for p in found.partitions.values())
                ):
                    waiting.discard(name)
                    ready[name] = len(found.partitions)
            if not waiting:
                return ready
            if time.monotonic() > deadline:
                raise KafkaRequestError(
                    f"topics {sorted(waiting)} created but without leaders after "
                    f"{self.timeout_s:.0f} s on {self.servers}"
                )
            time.sleep(0.05)
        return ready


LEADER_CHANGE_CODES = frozenset({5, 6, 9, 74, 75, -195})
"""librdkafka error codes of a partition whose leader is changing: LEADER_NOT_AVAILABLE,
NOT_LEADER_FOR_PARTITION, REPLICA_NOT_AVAILABLE, FENCED_LEADER_EPOCH, UNKNOWN_LEADER_EPOCH and
_TRANSPORT (the old leader's connection dropped). A broker killed or restarted answers with
them until the controller has elected a new leader and the client has its metadata."""


def query_watermarks(
    consumer: Any,
    topic: str,
    partition: int,
    timeout_s: float,
    *,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> tuple[int, int]:
    """Low and high watermark of one partition, asked of its leader (``cached=False``).

    A leader change under way (:data:`LEADER_CHANGE_CODES`) is waited out and asked again
    until ``timeout_s`` has passed: a replicated topic whose leader was lost answers again
    once a new one is elected, and a reader that gave up at the first answer would stop a
    pipeline that loses nothing. Any other error, or a leader change outlasting the timeout,
    raises :class:`KafkaRequestError` with one line."""
    from confluent_kafka import KafkaException
    from confluent_kafka import TopicPartition as CTP

    deadline = clock() + timeout_s
    while True:
        left = max(0.1, deadline - clock())
        try:
            low, high = consumer.get_watermark_offsets(
                CTP(topic, partition), timeout=left, cached=False
            )
            return int(low), int(high)
        except KafkaException as exc:
            err = exc.args[0] if exc.args else None  # a KafkaError
            code, reason = (None, str(exc)) if err is None else (err.code(), err.str())
            if code not in LEADER_CHANGE_CODES or clock() >= deadline:
                raise KafkaRequestError(
                    f"cannot read offsets of {topic}-{partition}: {reason}"
                ) from None
            log.info("offsets of %s-%s: %s; asking again", topic, partition, reason)
            sleep(min(0.5, max(0.0, deadline - clock())))


def _answers(host: str, port: int, timeout_s: float) -> bool:
    """True when something accepts TCP connections at ``host:port`` (a killed broker's port
    refuses them)."""
    import socket

    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            return True
    except OSError:
        return False


def explain_unacknowledged(
    conf: Mapping[str, Any], topics: Sequence[str], timeout_s: float = 5.0
) -> str | None:
    """Why ``acks=all`` writes to ``topics`` cannot be acknowledged now, in one line, or None
    when the cluster looks able to take them.

    librdkafka retries NOT_ENOUGH_REPLICAS (and a leader waiting for followers that are gone)
    until ``delivery.timeout.ms``, then reports only "Message timed out". This looks at the
    cluster instead: which brokers of its metadata accept connections, and for each partition
    whether its leader answers and how many of its in-sync replicas do, against the topic's
    ``min.insync.replicas``. (When two of three KRaft nodes are down the controller quorum is
    lost and the metadata still lists the old in-sync replicas: counting those that answer
    tells the truth.) Bounded by about ``timeout_s`` plus one second per broker.
    """
    from confluent_kafka.admin import AdminClient, ConfigResource

    servers = str(conf.get("bootstrap.servers", "?"))
    quiet = logging.getLogger("streamscale.kafka.diagnosis")
    quiet.addHandler(logging.NullHandler())
    quiet.propagate = False
    admin = AdminClient({**conf, "logger": quiet, "socket.connection.setup.timeout.ms": 1000})
    try:
        md = admin.list_topics(timeout=timeout_s)
    except Exception:
        return f"UNREACHABLE: no broker of {servers} answers"
    up = {b.id for b in md.brokers.values() if _answers(b.host, b.port, 1.0)}
    down = sorted(f"{b.id} ({b.host}:{b.port})" for b in md.brokers.values() if b.id not in up)
    min_isr: dict[str, int | None] = {}
    for topic in topics:
        resource = ConfigResource("topic", topic)
        try:  # may time out when the client asks a broker that is down
            found = admin.describe_configs([resource])[resource].result(timeout=timeout_s)
            min_isr[topic] = int(found["min.insync.replicas"].value)
        except Exception:
            min_isr[topic] = None
    unknown: list[str] = []
    problems: list[str] = []
    for topic in topics:
        meta = md.topics.get(topic)
        if meta is None or meta.error is not None:
            unknown.append(topic)
            continue
        for pid, part in sorted(meta.partitions.items()):
            live = [r for r in part.isrs if r in up]
            # Unknown: the project's default, min(2, replication factor).
            need = min_isr[topic] or min(2, len(part.replicas))
            if part.leader not in up:
                problems.append(f"{topic}-{pid} has no live leader (broker {part.leader} down)")
            elif len(live) < need:
                problems.append(
                    f"{topic}-{pid} has {len(live)} live in-sync replica(s) of "
                    f"min.insync.replicas={need}"
                )
    brokers = f"{len(up)} of {len(md.brokers)} brokers answer" + (
        f", down: {', '.join(down)}" if down else ""
    )
    if problems:
        more = f" (+{len(problems) - 3} more)" if len(problems) > 3 else ""
        return f"NOT_ENOUGH_REPLICAS: {'; '.join(problems[:3])}{more} ({brokers})"
    if unknown:
        return f"UNKNOWN_TOPIC: {', '.join(unknown)} not in the metadata of {servers}"
    return None
