"""Options of the ``streamscale-kafka`` source and sink, parsed and checked (pure).

Names follow Spark's Kafka connector: ``kafka.bootstrap.servers`` (and any ``kafka.*``
librdkafka key), ``subscribe``, ``subscribePattern``, ``assign``, ``startingOffsets``,
``maxOffsetsPerTrigger``, ``minPartitions``, ``failOnDataLoss``, ``includeHeaders``,
``groupIdPrefix``, ``kafka.group.id``, ``topic``. Ours: ``queryName`` (names the consumer
group) and ``coPartitioned``
(one task reads the same partition number of every topic, as a Kafka Streams join task does).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Literal

from streamscale.errors import ConfigError
from streamscale.kafka.offsets import OffsetError, Offsets, TopicPartition, from_json, parse_assign

_TRUE = {"true", "1", "yes"}
_FALSE = {"false", "0", "no"}

# Options Spark's connector refuses because the source manages them itself.
_UNSUPPORTED_KAFKA = {
    "kafka.auto.offset.reset": "set startingOffsets instead",
    "kafka.enable.auto.commit": "offsets are committed after each micro-batch",
    "kafka.key.deserializer": "keys are returned as binary",
    "kafka.value.deserializer": "values are returned as binary",
}


class OptionError(ConfigError):
    """An option is missing, malformed or in conflict with another; the message says which."""


def _bool(options: _Options, name: str, default: bool) -> bool:
    raw = options.get(name)
    if raw is None:
        return default
    value = str(raw).strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise OptionError(f"option {name} must be true or false, got {raw!r}")


def _positive_int(options: _Options, name: str) -> int | None:
    raw = options.get(name)
    if raw is None:
        return None
    try:
        value = int(str(raw))
    except ValueError:
        raise OptionError(f"option {name} must be a positive integer, got {raw!r}") from None
    if value <= 0:
        raise OptionError(f"option {name} must be a positive integer, got {raw!r}")
    return value


class _Options(dict[str, str]):
    """Option names are case-insensitive in Spark: store and look up in lower case."""

    def __init__(self, options: Mapping[str, str]) -> None:
        super().__init__({str(k).lower(): str(v) for k, v in options.items()})

    def get(self, key: str, default: str | None = None) -> str | None:  # type: ignore[override]
        return super().get(key.lower(), default)

    def __getitem__(self, key: str) -> str:
        return super().__getitem__(key.lower())


@dataclass(frozen=True)
class SourceOptions:
    """Everything the source needs, validated at query start."""

    kafka: Mapping[str, str]
    subscribe: tuple[str, ...] = ()
    subscribe_pattern: str | None = None
    assign: tuple[TopicPartition, ...] = ()
    starting: Literal["earliest", "latest"] | Offsets = "latest"
    max_offsets_per_trigger: int | None = None
    min_partitions: int | None = None
    fail_on_data_loss: bool = True
    include_headers: bool = False
    co_partitioned: bool = False
    group_id: str = "streamscale"
    poll_timeout_s: float = 120.0
    extra: Mapping[str, str] = field(default_factory=dict)

    @property
    def servers(self) -> str:
        return self.kafka.get("bootstrap.servers", "?")


def kafka_params(options: Mapping[str, str]) -> dict[str, str]:
    """The ``kafka.*`` options as librdkafka keys, refusing those the source manages."""
    out = {}
    for key, value in options.items():
        if not key.lower().startswith("kafka."):
            continue
        if key.lower() in _UNSUPPORTED_KAFKA:
            raise OptionError(f"option {key} is not supported: {_UNSUPPORTED_KAFKA[key.lower()]}")
        out[key[len("kafka.") :].lower()] = value
    if not out.get("bootstrap.servers"):
        raise OptionError("option kafka.bootstrap.servers is required (host:port[,host:port])")
    return out


def parse_source(options: Mapping[str, str]) -> SourceOptions:
    """Parse the reader's options; :class:`OptionError` names the option to change."""
    options = _Options(options)
    kafka = kafka_params(options)
    strategies = [k for k in ("subscribe", "subscribePattern", "assign") if options.get(k)]
    if len(strategies) != 1:
        given = ", ".join(strategies) if strategies else "none"
        raise OptionError(
            f"exactly one of subscribe, subscribePattern or assign must be set (given: {given})"
        )
    subscribe: tuple[str, ...] = ()
    pattern = None
    assign: tuple[TopicPartition, ...] = ()
    if "subscribe" in strategies:
        subscribe = tuple(t.strip() for t in options["subscribe"].split(",") if t.strip())
        if not subscribe:
            raise OptionError("option subscribe names no topic")
    elif "subscribePattern" in strategies:
        pattern = options["subscribePattern"]
        try:
            re.compile(pattern)
        except re.error as exc:
            raise OptionError(f"option subscribePattern is not a valid regex: {exc}") from None
    else:
        try:
            assign = tuple(parse_assign(options["assign"]))
        except OffsetError as exc:
            raise OptionError(f"option assign: {exc}") from None

    raw_start = (options.get("startingOffsets") or "latest").strip()
    starting: Literal["earliest", "latest"] | Offsets
    if raw_start.lower() in ("earliest", "latest"):
        starting = "earliest" if raw_start.lower() == "earliest" else "latest"
    else:
        try:
            starting = from_json(raw_start)
        except OffsetError as exc:
            raise OptionError(
                "option startingOffsets must be earliest, latest or JSON "
                f'{{"t": {{"0": 5}}}}: {exc}'
            ) from None
    if options.get("endingOffsets"):
        raise OptionError("option endingOffsets is for batch queries; streaming reads continuously")

    group = kafka.pop("group.id", None)
    if group is None:
        prefix = options.get("groupIdPrefix") or "streamscale"
        name = options.get("queryName")
        if not name:
            what = ",".join(subscribe) or pattern or options.get("assign") or ""
            name = hashlib.sha1(what.encode()).hexdigest()[:10]
        group = f"{prefix}-{name}"

    poll_ms = _positive_int(options, "kafkaConsumer.pollTimeoutMs")
    return SourceOptions(
        kafka=kafka,
        subscribe=subscribe,
        subscribe_pattern=pattern,
        assign=assign,
        starting=starting,
        max_offsets_per_trigger=_positive_int(options, "maxOffsetsPerTrigger"),
        min_partitions=_positive_int(options, "minPartitions"),
        fail_on_data_loss=_bool(options, "failOnDataLoss", True),
        include_headers=_bool(options, "includeHeaders", False),
        co_partitioned=_bool(options, "coPartitioned", False),
        group_id=group,
        poll_timeout_s=(poll_ms or 120_000) / 1000.0,
    )


Delivery = Literal["at-least-once", "exactly-once"]
MARKER_TOPIC: Final = "streamscale-txn-markers"
"""The compacted topic of exactly-once markers (one record per transactional id and
transaction; :mod:`streamscale.kafka.transactions`)."""


def parse_delivery(value: str | None) -> Delivery:
    """The ``delivery`` option (any case; default at-least-once)."""
    raw = (value or "at-least-once").strip().lower()
    if raw == "at-least-once":
        return "at-least-once"
    if raw == "exactly-once":
        return "exactly-once"
    raise OptionError(f"option delivery must be at-least-once or exactly-once, got {value!r}")


@dataclass(frozen=True)
class SinkOptions:
    """The writer's options: connection keys, the default topic, and the delivery
    (``delivery``: ``at-least-once``, the default, or ``exactly-once``: Kafka transactions,
    :mod:`streamscale.kafka.transactions`; ``transactionalRole`` names the writing stage,
    ``markerTopic`` the compacted topic of the transactions' markers)."""

    kafka: Mapping[str, str]
    topic: str | None = None
    delivery: Delivery = "at-least-once"
    role: str = "out"
    marker_topic: str = MARKER_TOPIC


HEADERS_TYPE: Final = "ARRAY<STRUCT<key: STRING, value: BINARY>>"
"""The ``headers`` column of Kafka rows (both sources' and the sink's), as Spark SQL types it."""


def headers_arrow_type() -> Any:
    """:data:`HEADERS_TYPE` as an Arrow type."""
    import pyarrow as pa

    return pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))


def parse_sink(options: Mapping[str, str], columns: list[str]) -> SinkOptions:
    """Parse the writer's options against the DataFrame's ``columns``."""
    options = _Options(options)
    kafka = kafka_params(options)
    topic = options.get("topic") or None
    if "value" not in columns:
        raise OptionError(f"the Kafka sink needs a 'value' column; the DataFrame has {columns}")
    if topic is None and "topic" not in columns:
        raise OptionError("set option topic or give the DataFrame a 'topic' column")
    unknown = sorted(set(columns) - {"key", "value", "topic", "partition", "headers"})
    if unknown:
        raise OptionError(
            f"the Kafka sink takes columns key, value, topic, partition, headers; "
            f"drop or rename {unknown}"
        )
    role = options.get("transactionalRole") or "out"
    if not re.fullmatch(r"[A-Za-z0-9._-]+", role):
        raise OptionError(f"option transactionalRole must be letters, digits, . _ -: {role!r}")
    return SinkOptions(
        kafka=kafka,
        topic=topic,
        delivery=parse_delivery(options.get("delivery")),
        role=role,
        marker_topic=options.get("markerTopic") or MARKER_TOPIC,
    )
