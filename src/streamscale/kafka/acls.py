"""The ACLs a pipeline principal needs on a secured cluster, from the topic catalog (pure).

Least privilege, as Kafka's ``StandardAuthorizer`` checks each request: READ and DESCRIBE on
the topics a pipeline reads (Fetch, ListOffsets, the group commits' OffsetCommit), WRITE and
DESCRIBE on those it writes (outputs and dead letters), READ, WRITE and DESCRIBE on the
exactly-once marker topic (the writers read their last marker back), its consumer groups
(``streamscale-*``: the group commits, the offset and marker readers), its transactional ids
(``streamscale-*``, :func:`streamscale.kafka.transactions.id_prefix`) and IDEMPOTENT_WRITE on
the cluster (idempotent producers). Nothing else: no CREATE, no ALTER, no DELETE; topics are
created by an administrator (``streamscale topics apply``).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

from streamscale.kafka.options import MARKER_TOPIC

Resource = Literal["topic", "group", "transactional_id", "cluster"]
Pattern = Literal["literal", "prefixed"]
Operation = Literal["READ", "WRITE", "DESCRIBE", "IDEMPOTENT_WRITE"]

GROUP_PREFIX = "streamscale-"
"""Every consumer group the project's clients use (:mod:`streamscale.kafka.groups`)."""
TRANSACTIONAL_PREFIX = "streamscale-"
"""Every transactional id the exactly-once writers use."""
CLUSTER = "kafka-cluster"


@dataclass(frozen=True, order=True)
class Grant:
    """One ALLOW ACL of ``principal`` (``User:name``), from any host."""

    principal: str
    resource: Resource
    name: str
    pattern: Pattern
    operation: Operation

    def __str__(self) -> str:
        pattern = "" if self.pattern == "literal" else f" ({self.pattern})"
        return f"{self.principal} {self.operation} on {self.resource} {self.name}{pattern}"


def pipeline_grants(
    user: str,
    inputs: Iterable[str],
    outputs: Iterable[str],
    *,
    marker_topic: str = MARKER_TOPIC,
    group_prefix: str = GROUP_PREFIX,
    transactional_prefix: str = TRANSACTIONAL_PREFIX,
) -> list[Grant]:
    """The ACLs of pipeline principal ``user`` that reads ``inputs`` and writes ``outputs``
    (sorted, without duplicates)."""
    principal = f"User:{user}"
    grants: set[Grant] = set()

    def topic(name: str, *ops: Operation) -> None:
        grants.update(Grant(principal, "topic", name, "literal", op) for op in ops)

    for name in inputs:
        topic(name, "READ", "DESCRIBE")
    for name in outputs:
        topic(name, "WRITE", "DESCRIBE")
    topic(marker_topic, "READ", "WRITE", "DESCRIBE")
    group_ops: tuple[Operation, ...] = ("READ", "DESCRIBE")
    grants.update(Grant(principal, "group", group_prefix, "prefixed", op) for op in group_ops)
    id_ops: tuple[Operation, ...] = ("WRITE", "DESCRIBE")
    grants.update(
        Grant(principal, "transactional_id", transactional_prefix, "prefixed", op) for op in id_ops
    )
    grants.add(Grant(principal, "cluster", CLUSTER, "literal", "IDEMPOTENT_WRITE"))
    return sorted(grants)


def grant_command(grant: Grant) -> str:
    """The ``kafka-acls`` arguments that add ``grant`` (what a refusal tells to run)."""
    what = {
        "topic": f"--topic {grant.name}",
        "group": f"--group {grant.name}",
        "transactional_id": f"--transactional-id {grant.name}",
        "cluster": "--cluster",
    }[grant.resource]
    pattern = " --resource-pattern-type prefixed" if grant.pattern == "prefixed" else ""
    return (
        f"--add --allow-principal {grant.principal} --operation {grant.operation} {what}{pattern}"
    )
