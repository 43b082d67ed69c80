"""What a secured cluster's refusal means, in one line that says what to fix (pure).

A refusal reaches the project as text: a Java client's exception inside a failed query's
trace (Spark's connector, the JVM writer), or librdkafka's error string (the
``streamscale-kafka`` source and sink, the admin, the generators). :func:`refusal` reads
either and returns the matching error of the family (:mod:`streamscale.errors`):

- a wrong password: ``SASL authentication failed for user pipeline: ...``;
- an untrusted or expired certificate, or one not for the address: ``TLS handshake failed:
  the broker's certificate ...``;
- a missing ACL: ``TOPIC_AUTHORIZATION_FAILED on achats-enrichis: grant WRITE ...`` (READ for
  a topic read, the group's READ, the transactional id's WRITE, the cluster's
  IDEMPOTENT_WRITE), with the ``kafka-acls`` arguments that grant it.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from streamscale.errors import (
    AuthenticationError,
    AuthorizationError,
    CertificateError,
    KafkaRequestError,
)
from streamscale.kafka.acls import (
    GROUP_PREFIX,
    TRANSACTIONAL_PREFIX,
    Grant,
    Operation,
    grant_command,
)

_AUTHENTICATION = re.compile(
    r"SaslAuthenticationException|SASL authentication error|SASL_AUTHENTICATION_FAILED"
    r"|Authentication failed during authentication|Local: Authentication failure"
)
_EXPIRED = re.compile(r"certificate has expired|CertificateExpiredException|validity check failed")
_UNTRUSTED = re.compile(
    r"PKIX path building failed|unable to find valid certification path"
    r"|certificate verify failed|self[- ]signed certificate|unable to get local issuer"
)
_WRONG_NAME = re.compile(
    r"No subject alternative (?:names|DNS name|IP address)|IP address mismatch|Hostname mismatch"
)
_JAVA_TOPICS = re.compile(r"Not authorized to access topics: \[([^\]]*)\]")
_LIBRDKAFKA_TOPIC = re.compile(
    r"([A-Za-z0-9._-]+)\[-?\d+\]: (?:Broker: )?Topic authorization failed", re.IGNORECASE
)
_TOPIC = re.compile(
    r"TopicAuthorizationException|TOPIC_AUTHORIZATION_FAILED|Topic authorization failed",
    re.IGNORECASE,
)
_GROUP = re.compile(
    r"GroupAuthorizationException|GROUP_AUTHORIZATION_FAILED|Group authorization failed",
    re.IGNORECASE,
)
_JAVA_GROUP = re.compile(r"Not authorized to access group: ([A-Za-z0-9._-]+)")
_TRANSACTIONAL = re.compile(
    r"TransactionalIdAuthorizationException|TRANSACTIONAL_ID_AUTHORIZATION_FAILED"
    r"|Transactional Id authorization failed",
    re.IGNORECASE,
)
_CLUSTER = re.compile(
    r"ClusterAuthorizationException|CLUSTER_AUTHORIZATION_FAILED|Cluster authorization failed",
    re.IGNORECASE,
)
_WRITING = re.compile(
    r"KafkaWrite|KafkaDataWriter|KafkaProducer|not delivered|DeliveryError|delivery"
    r"|Produce|TransactionalWriter|produc",
    re.IGNORECASE,
)


def refusal(
    text: str, *, user: str | None = None, topics: Sequence[str] = ()
) -> KafkaRequestError | None:
    """The refusal ``text`` reports, as one-line error naming what to fix (None: not a
    refusal of security). ``user``: the client's SASL user (Kafka's errors do not name it);
    ``topics``: the topics of the request, for errors that do not name theirs."""
    who = user or "?"
    principal = f"User:{who}"
    if _AUTHENTICATION.search(text):
        return AuthenticationError(
            f"SASL authentication failed for user {who}: check STREAMSCALE_SASL_USERNAME and "
            "STREAMSCALE_SASL_PASSWORD (or STREAMSCALE_SASL_PASSWORD_FILE) against the "
            "cluster's SCRAM credentials"
        )
    if _EXPIRED.search(text):
        return CertificateError(
            "TLS handshake failed: the broker's certificate has expired: renew it on the "
            "broker (a certificate signed by the CA in STREAMSCALE_SSL_CA_LOCATION)"
        )
    if _WRONG_NAME.search(text):
        return CertificateError(
            "TLS handshake failed: the broker's certificate does not name the address in "
            "STREAMSCALE_BOOTSTRAP_SERVERS: connect by a name or address the certificate lists"
        )
    if _UNTRUSTED.search(text):
        return CertificateError(
            "TLS handshake failed: the broker's certificate is not signed by a CA the client "
            "trusts: set STREAMSCALE_SSL_CA_LOCATION to the cluster's CA certificate (PEM)"
        )
    if _TRANSACTIONAL.search(text):
        grant = Grant(principal, "transactional_id", TRANSACTIONAL_PREFIX, "prefixed", "WRITE")
        return AuthorizationError(
            "TRANSACTIONAL_ID_AUTHORIZATION_FAILED on the exactly-once writer's ids "
            f"({TRANSACTIONAL_PREFIX}*): grant WRITE and DESCRIBE on them to {principal} "
            f"(kafka-acls {grant_command(grant)})"
        )
    if _GROUP.search(text):
        found = _JAVA_GROUP.search(text)
        name = found.group(1) if found else f"{GROUP_PREFIX}*"
        grant = Grant(principal, "group", GROUP_PREFIX, "prefixed", "READ")
        return AuthorizationError(
            f"GROUP_AUTHORIZATION_FAILED on group {name}: grant READ and DESCRIBE on groups "
            f"{GROUP_PREFIX}* to {principal} (kafka-acls {grant_command(grant)})"
        )
    if _TOPIC.search(text):
        named = _topics_named(text) or list(topics)
        where = ", ".join(named) if named else "a topic of the request"
        op: Operation = "WRITE" if _WRITING.search(text) else "READ"
        grants = [Grant(principal, "topic", t, "literal", op) for t in named[:1]]
        how = f" (kafka-acls {grant_command(grants[0])})" if grants else ""
        return AuthorizationError(
            f"TOPIC_AUTHORIZATION_FAILED on {where}: grant {op} and DESCRIBE on it to "
            f"{principal}{how}"
        )
    if _CLUSTER.search(text):
        grant = Grant(principal, "cluster", "kafka-cluster", "literal", "IDEMPOTENT_WRITE")
        return AuthorizationError(
            f"CLUSTER_AUTHORIZATION_FAILED: grant IDEMPOTENT_WRITE on the cluster to "
            f"{principal} (kafka-acls {grant_command(grant)})"
        )
    return None


def _topics_named(text: str) -> list[str]:
    found = _JAVA_TOPICS.search(text)
    if found:
        return [t.strip() for t in found.group(1).split(",") if t.strip()]
    names: list[str] = []
    for match in _LIBRDKAFKA_TOPIC.finditer(text):
        if match.group(1) not in names:
            names.append(match.group(1))
    return names


def explain(text: str, *, user: str | None = None, topics: Sequence[str] = ()) -> str | None:
    """The one line of :func:`refusal`, or None."""
    found = refusal(text, user=user, topics=topics)
    return None if found is None else str(found)
