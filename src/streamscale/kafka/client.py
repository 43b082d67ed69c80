"""Kafka client configurations with streamscale's reliable defaults.

Producers: ``acks=all``, idempotence, retries, and the Java client's partitioner
(``murmur2_random``) so that a key lands where any other Kafka client would put it.
Errors are never swallowed: delivery failures surface through :class:`DeliveryError`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

RELIABLE_PRODUCER_DEFAULTS: dict[str, Any] = {
    "acks": "all",
    "enable.idempotence": True,
    "retries": 2147483647,
    "max.in.flight.requests.per.connection": 5,
    "delivery.timeout.ms": 120000,
    "partitioner": "murmur2_random",
    "linger.ms": 20,
    "batch.num.messages": 10000,
    "queue.buffering.max.messages": 500000,
    "compression.type": "none",
}

CONSUMER_DEFAULTS: dict[str, Any] = {
    "enable.auto.commit": False,
    "enable.auto.offset.store": False,
    "auto.offset.reset": "error",
    "session.timeout.ms": 6000,
    "fetch.wait.max.ms": 100,
    "queued.min.messages": 200000,
    "enable.partition.eof": True,
}


class DeliveryError(RuntimeError):
    """A record could not be delivered to Kafka (after the producer's own retries)."""


def producer_config(base: Mapping[str, Any], **overrides: Any) -> dict[str, Any]:
    """Reliable producer settings over the connection keys in ``base``."""
    return {**RELIABLE_PRODUCER_DEFAULTS, **base, **overrides}


def consumer_config(base: Mapping[str, Any], group_id: str, **overrides: Any) -> dict[str, Any]:
    """Manual-commit consumer settings over ``base``; offsets are chosen by the caller."""
    return {**CONSUMER_DEFAULTS, **base, "group.id": group_id, **overrides}


def strip_kafka_prefix(options: Mapping[str, str]) -> dict[str, str]:
    """``kafka.x`` options (Spark's naming) → librdkafka ``x`` keys."""
    return {k[len("kafka.") :]: v for k, v in options.items() if k.startswith("kafka.")}
