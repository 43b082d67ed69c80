"""Every topic the seed pipelines need, as declarative specs for ``streamscale topics apply``."""

from __future__ import annotations

import dataclasses
from typing import Any, Literal, TypeVar

from streamscale.kafka.admin import TopicSpec
from streamscale.kafka.transactions import marker_topic_spec

ENRICHMENT = "enrichment"
GAME_SESSIONS = "game-sessions"
WEEK_MS = 7 * 24 * 3600 * 1000
INPUTS: dict[str, tuple[str, ...]] = {
    ENRICHMENT: ("achats", "referentiel"),
    GAME_SESSIONS: ("GAME-FRAME-RQ", "GAME-FRAME-RS"),
}
"""The topics each pipeline reads; every other topic of its catalog it writes."""

Topics = TypeVar("Topics", bound=Any)


def suffixed(topics: Topics, tag: str) -> Topics:
    """A pipeline's topic set (``EnrichmentTopics``, ``GameTopics``) with ``-tag`` after every
    name: its own copy of the catalog beside others on one cluster (a benchmark's engines)."""
    names = {f.name: f"{getattr(topics, f.name)}-{tag}" for f in dataclasses.fields(topics)}
    return dataclasses.replace(topics, **names)


def pipeline_topics(
    partitions: int = 4,
    retention_ms: int = WEEK_MS,
    replication_factor: int | None = None,
    delivery: Literal["at-least-once", "exactly-once"] = "at-least-once",
) -> dict[str, list[TopicSpec]]:
    """Topics per pipeline; tables (the referential) are compacted, streams have retention.
    Replication factor None is min(3, brokers), with min.insync.replicas min(2, RF). With
    exactly-once delivery each pipeline also needs the transactions' marker topic, created
    here with the cluster's replication like the rest (the writers create it only if missing)."""

    def stream(name: str) -> TopicSpec:
        return TopicSpec(name, partitions, replication_factor, retention_ms=retention_ms)

    markers = [marker_topic_spec(replication_factor=replication_factor)]
    extra = markers if delivery == "exactly-once" else []
    return {
        ENRICHMENT: [
            stream("achats"),
            TopicSpec("referentiel", partitions, replication_factor, table=True),
            stream("achats-enrichis"),
            stream(f"{ENRICHMENT}-dlq"),
            *extra,
        ],
        GAME_SESSIONS: [
            stream("GAME-FRAME-RQ"),
            stream("GAME-FRAME-RS"),
            stream("SESSIONS"),
            stream(f"{GAME_SESSIONS}-dlq"),
            *extra,
        ],
    }


def topic_access() -> tuple[list[str], list[str]]:
    """The topics the seed pipelines read, and those they write (outputs and dead letters),
    from :func:`pipeline_topics` and :data:`INPUTS`: what a pipeline principal is granted
    on a secured cluster (:func:`streamscale.kafka.acls.pipeline_grants`)."""
    reads = sorted({name for names in INPUTS.values() for name in names})
    writes = sorted(
        {
            spec.name
            for specs in pipeline_topics().values()
            for spec in specs
            if spec.name not in reads
        }
    )
    return reads, writes
