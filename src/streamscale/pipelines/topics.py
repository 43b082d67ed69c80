"""Every topic the seed pipelines need, as declarative specs for ``streamscale topics apply``."""

from __future__ import annotations

from streamscale.kafka.admin import TopicSpec

ENRICHMENT = "enrichment"
GAME_SESSIONS = "game-sessions"
WEEK_MS = 7 * 24 * 3600 * 1000


def pipeline_topics(
    partitions: int = 4, retention_ms: int = WEEK_MS, replication_factor: int | None = None
) -> dict[str, list[TopicSpec]]:
    """Topics per pipeline; tables (the referential) are compacted, streams have retention.
    Replication factor None is min(3, brokers), with min.insync.replicas min(2, RF)."""

    def stream(name: str) -> TopicSpec:
        return TopicSpec(name, partitions, replication_factor, retention_ms=retention_ms)

    return {
        ENRICHMENT: [
            stream("achats"),
            TopicSpec("referentiel", partitions, replication_factor, table=True),
            stream("achats-enrichis"),
            stream(f"{ENRICHMENT}-dlq"),
        ],
        GAME_SESSIONS: [
            stream("GAME-FRAME-RQ"),
            stream("GAME-FRAME-RS"),
            stream("SESSIONS"),
            stream(f"{GAME_SESSIONS}-dlq"),
        ],
    }
