"""Kafka client configurations with streamscale's reliable defaults.

Producers: ``acks=all``, idempotence, retries, and the Java client's partitioner
(``murmur2_random``) so that a key lands where any other Kafka client would put it.
Errors are never swallowed: delivery failures surface through :class:`DeliveryError`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from streamscale.errors import KafkaRequestError

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


class DeliveryError(KafkaRequestError):
    """A record could not be delivered to Kafka (after the producer's own retries)."""


def producer_config(base: Mapping[str, Any], **overrides: Any) -> dict[str, Any]:
    """Reliable producer settings over the connection keys in ``base``."""
    return {**RELIABLE_PRODUCER_DEFAULTS, **base, **overrides}


_CAUSES = ("DeliveryError: ", "KafkaException: ", "KafkaError: ", "TimeoutException: ")


def first_error_line(text: str, user: str | None = None) -> str:
    """One line out of an error that may be a whole JVM or Python trace (a failed streaming
    query): a secured cluster's refusal as :mod:`streamscale.kafka.refusals` explains it (for
    SASL ``user``), else the message of the innermost Kafka or delivery error if it names one,
    else the first non-empty line."""
    from streamscale.kafka.refusals import explain

    why = explain(text, user=user)
    if why is not None:
        return why
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    for cause in _CAUSES:
        for line in lines:
            at = line.find(cause)
            if at >= 0:
                return line[at:]
    return lines[0] if lines else text.strip()
