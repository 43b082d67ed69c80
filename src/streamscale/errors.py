"""The exceptions streamscale raises on purpose: one family under :class:`Error`.

``except streamscale.Error`` catches them all. Each concern has its own subclass, which also
keeps the standard base a caller already expects: ``ValueError`` for something given that
cannot work (an option, a setting, a profile, a trace, a record), ``RuntimeError`` for an
operation that failed (Kafka, a process the project starts). The modules define their own,
more precise subclasses of these (``OptionError``, ``BrokerError``...).

Pure: imports nothing, so that every module, the pure ones included, can use it.
"""

from __future__ import annotations

__all__ = [
    "AuthenticationError",
    "AuthorizationError",
    "CertificateError",
    "ConfigError",
    "Error",
    "KafkaRequestError",
    "LaunchError",
    "PipelineError",
    "RecordError",
    "ScalingError",
    "UnknownTopicError",
    "UnreachableError",
]


class Error(Exception):
    """Base of every error streamscale raises on purpose; its message is one line."""


class ConfigError(Error, ValueError):
    """A setting, option, profile, trace or command-line value that cannot work."""


class RecordError(Error, ValueError):
    """A Kafka record (key or body) that cannot be decoded or used."""


class KafkaRequestError(Error, RuntimeError):
    """A request to the Kafka cluster failed; the message names the servers, topic or
    partition. (Not ``KafkaError``: that name is confluent-kafka's.)"""


class UnreachableError(KafkaRequestError):
    """No broker answered within the timeout."""


class UnknownTopicError(KafkaRequestError):
    """A topic that should exist does not."""


class AuthenticationError(KafkaRequestError):
    """The cluster refused the client's credentials (SASL)."""


class AuthorizationError(KafkaRequestError):
    """The cluster's ACLs do not let the principal use a topic, group or transactional id;
    the message says which ACL to grant."""


class CertificateError(KafkaRequestError):
    """The TLS handshake failed on the broker's certificate (untrusted, expired, or not for
    the address); the message says which."""


class LaunchError(Error, RuntimeError):
    """Something the project starts or needs on this machine (a process, the broker, the
    Spark cluster, the jars, a class archive) is missing, or failed to start or stop."""


class ScalingError(Error, RuntimeError):
    """The autoscaler cannot drive the executors (the cluster manager takes no requests)."""


class PipelineError(Error, RuntimeError):
    """A pipeline's streaming query failed; the message carries the query's own error."""
