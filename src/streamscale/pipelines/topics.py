"""Every topic the seed pipelines need, as declarative specs for ``streamscale topics apply``."""

from __future__ import annotations

from streamscale.kafka.admin import TopicSpec

ENRICHMENT = "enrichment"
GAME_SESSIONS = "game-sessions"
WEEK_MS = 7 * 24 * 3600 * 1000


def pipeline_topics(partitions: int = 4, retention_ms: int = WEEK_MS) -> dict[str, list[TopicSpec]]:
    """Topics per pipeline; tables (the referential) are compacted, streams have retention."""

    def stream(name: str) -> TopicSpec:
        return TopicSpec(name, partitions, retention_ms=retention_ms)

    return {
        ENRICHMENT: [
            stream("achats"),
            TopicSpec("referentiel", partitions, table=True),
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
