"""Game sessions end to end: approvals within 3 s, decoded hits, session gaps, restart."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pipeline_io import consume_all, other_source, produce

from streamscale.lag.model import state_operators
from streamscale.pipelines import hits as codec
from streamscale.pipelines.game_sessions import GameSessions, GameTopics
from streamscale.settings import KafkaSource, Settings

pytestmark = pytest.mark.integration

T0 = 1_767_225_600_000  # 2026-01-01T00:00:00Z
A, B, C = ("100001", "EU", "NeonBrawl"), ("200002", "US", "IronFist"), ("300003", "AU", "SkyRonin")


def hit(impact: int, key: str, direction: str, kind: str, game: str) -> str:
    return codec.encode_hit(codec.Hit(impact, key, direction, kind, "Pro", game))  # type: ignore[arg-type]


def frame(
    machine: tuple[str, str, str], ts: int, hits: list[str], approval_ms: int | None
) -> tuple[list[Any], list[Any]]:
    """The request and (if ``approval_ms`` is not None) its approval ``approval_ms`` later."""
    mid, zone, game = machine
    key = codec.header_json(codec.FrameHeader(ts, mid, zone))  # type: ignore[arg-type]
    value = codec.body_json(codec.FrameBody(game, tuple(hits)))
    request = [(key, value, ts, None)]
    approval = [] if approval_ms is None else [(key, value, ts + approval_ms, None)]
    return request, approval


def run(spark: Any, pipeline: GameSessions) -> dict[str, int]:
    query = pipeline.start(spark, {"availableNow": True})
    query.awaitTermination(300)
    assert query.exception() is None, query.exception()
    # Spark's state store holds the sessions: one stateful operator, on RocksDB, with the
    # state partitions the settings ask for (what /metrics and the autoscaler read).
    (op,) = state_operators(query.lastProgress)
    assert op.partitions == int(spark.conf.get("spark.sql.shuffle.partitions"))
    assert op.disk_bytes is not None and op.loaded is not None
    totals: dict[str, int] = {}
    for progress in query.recentProgress:
        for key, value in pipeline.batch_counts(progress).items():
            totals[key] = totals.get(key, 0) + value
    return totals


def sessions(settings: Settings, topic: str) -> list[tuple[str, dict[str, Any]]]:
    out = []
    for record in consume_all(settings, topic, 2):
        assert record.key is not None and record.value is not None
        out.append((record.key.decode(), json.loads(record.value)))
    return sorted(out, key=lambda kv: (kv[0], kv[1]["start"]))


def first_run(
    spark: Any, settings: Settings, topic_factory: Any, checkpoint: Path, source: KafkaSource | None
) -> tuple[GameTopics, GameSessions, dict[str, int]]:
    """Approvals in time, too late and missing, undecodable hits, a gap: the known answers."""
    topics = GameTopics(
        requests=topic_factory(2, "rq"),
        approvals=topic_factory(2, "rs"),
        output=topic_factory(2, "sessions"),
        dlq=topic_factory(1, "gdlq"),
    )
    g = A[2]
    frames = [
        frame(
            A, T0 + 1000, [hit(100, "X", "UP", "Direct", g), hit(50, "O", "LEFT", "Fatal", g)], 5
        ),
        frame(A, T0 + 2000, [hit(200, "X", "DOWN", "Missed", g)], 2000),
        frame(A, T0 + 3000, [hit(209, "X", "UP", "Fatal", g)], 3500),  # approved too late
        frame(A, T0 + 4000, [hit(209, "X", "UP", "Fatal", g)], None),  # never approved
        # one good hit, two undecodable ones (dead-lettered, the good one counts)
        frame(A, T0 + 5000, [hit(60, "O", "RIGHT", "Critical", g), "ZZ114101", "2A1141"], 100),
        frame(A, T0 + 50_000, [hit(42, "X", "UP", "Direct", g)], 1000),  # 45 s later: new session
        frame(B, T0 + 50_000, [hit(70, "O", "DOWN", "Special", B[2])], 0),
    ]
    produce(settings, topics.requests, [r for rq, _ in frames for r in rq])
    produce(settings, topics.approvals, [r for _, rs in frames for r in rs])

    pipeline = GameSessions(settings, str(checkpoint), topics, source)
    first = run(spark, pipeline)
    # Watermark: min over inputs of (newest event - 10 s) = T0 + 40 s: only A's first session
    # (ends T0 + 5 s + 30 s gap) is closed and written.
    out = sessions(settings, topics.output)
    assert [k for k, _ in out] == [A[0]]
    assert out[0][1] == {
        "machine": A[0],
        "zone": A[1],
        "game": g,
        "start": T0 + 1000,
        "end": T0 + 35_000,
        "firstTs": T0 + 1000,
        "lastTs": T0 + 5000,
        "frames": 3,
        "hits": 4,
        "totalImpact": 410,
        "maxImpact": 200,
        "impactTypes": {"Fatal": 1, "Critical": 1, "Special": 0, "Direct": 1, "Missed": 1},
        "directions": {"UP": 1, "DOWN": 1, "RIGHT": 1, "LEFT": 1},
    }
    dead = consume_all(settings, topics.dlq, 1)
    assert len(dead) == 1
    assert dead[0].header("error") == "undecodable_hit"
    assert "ZZ114101 (hex)" in dead[0].header("error.detail")
    assert "2A1141 (length)" in dead[0].header("error.detail")
    assert dead[0].header("source.topic") == topics.requests
    # 5 frames approved in time, 2 not (one approval came too late); 6 hits decoded, 2 not.
    # Read co-partitioned, every pair is made in a task and counted at once; through Spark's
    # connector, a pair is counted when its session window closes (B's and A's second are open).
    in_tasks = pipeline.source == "streamscale-kafka"
    assert {k: v for k, v in first.items() if k.startswith("join.") and v} == {
        "join.approved": 5 if in_tasks else 3,
        "join.unapproved": 2,
        "join.late_approvals": 1,
        "join.hits": 6 if in_tasks else 4,
        "join.hits_undecodable": 2,
    }
    return topics, pipeline, first


def test_sessions_join_within_3s_split_on_gap_and_survive_restart(
    spark: Any, settings: Settings, topic_factory: Any, checkpoint: Path
) -> None:
    """On the pipeline's default source (``auto``)."""
    settings = settings.model_copy(update={"kafka_source": "auto"})
    topics, pipeline, first = first_run(spark, settings, topic_factory, checkpoint, None)
    assert pipeline.source == GameSessions.default_source
    g = A[2]

    # Restart: A's second session continues with a frame of the next run; a far frame of C
    # moves the watermark past every open session.
    later = [
        frame(A, T0 + 60_000, [hit(80, "X", "RIGHT", "Missed", g)], 200),
        frame(C, T0 + 200_000, [hit(99, "O", "UP", "Direct", C[2])], 100),
    ]
    produce(settings, topics.requests, [r for rq, _ in later for r in rq])
    produce(settings, topics.approvals, [r for _, rs in later for r in rs])
    second = run(spark, GameSessions(settings, str(checkpoint), topics))

    out = sessions(settings, topics.output)
    assert [(k, v["start"], v["frames"]) for k, v in out] == [
        (A[0], T0 + 1000, 3),
        (A[0], T0 + 50_000, 2),  # one session across the restart
        (B[0], T0 + 50_000, 1),
    ]
    a2 = out[1][1]
    assert (a2["firstTs"], a2["lastTs"], a2["end"]) == (T0 + 50_000, T0 + 60_000, T0 + 90_000)
    assert (a2["hits"], a2["totalImpact"], a2["maxImpact"]) == (2, 122, 80)

    # Counts reconcile: 9 frames = 7 approved + 2 unapproved (a frame is approved as soon as
    # its approval is read); 8 approvals = 7 + 1 late; hits of approved frames = decoded +
    # undecodable; only C's window is still open.
    total = {k: first.get(k, 0) + second.get(k, 0) for k in first.keys() | second.keys()}
    assert total["join.approved"] == 7
    assert total["join.unapproved"] == 2
    assert total["join.late_approvals"] == 1
    assert total["join.duplicate_approvals"] == 0
    assert second["late.rows"] == 0
    # The state is Spark's: session windows in RocksDB (changelog files) in the checkpoint,
    # and nothing of the pipeline's own beside Spark's directories.
    names = {p.name for p in checkpoint.iterdir() if not p.name.startswith(".")}
    assert "state" in names and names <= {"commits", "metadata", "offsets", "sources", "state"}
    assert list((checkpoint / "state").rglob("*.changelog"))
    assert total["join.hits"] == 8 and total["join.hits_undecodable"] == 2
    assert total["hits_dlq.frames"] == 1 and total["hits_dlq.hits"] == 2
    assert total["frames_dlq.records"] == 0 and total["approvals_dlq.records"] == 0


def test_sessions_on_the_other_source(
    spark: Any, settings: Settings, topic_factory: Any, checkpoint: Path
) -> None:
    """The same answers when the pipeline reads with the source it does not pick itself
    (with Spark's connector no task reads both topics: every pair is made in the state store)."""
    source = other_source(GameSessions.default_source)
    _, pipeline, _ = first_run(spark, settings, topic_factory, checkpoint, source)
    assert pipeline.source == source


def test_topics_not_co_partitioned_pair_in_the_state_with_the_same_sessions(
    spark: Any, settings: Settings, topic_factory: Any, checkpoint: Path
) -> None:
    """Approvals written to other partitions than their frames (a producer that does not key
    by header) never meet their frame in a task: every pair is made in the state store, across
    micro-batches, and the sessions are still exactly the reference sessionizer's."""
    import random

    from streamscale.experiment import verify
    from streamscale.generate.game_frames import GameFrames
    from streamscale.generate.profiles import make_schedule

    topics = GameTopics(
        requests=topic_factory(2, "rq"),
        approvals=topic_factory(2, "rs"),
        output=topic_factory(1, "sessions"),
        dlq=topic_factory(1, "gdlq"),
    )
    generated = GameFrames(
        random.Random(7),
        make_schedule("steady", rate=50, count=400),  # 8 s of frames of 10-35 machines
        start_ms=T0,
        request_topic=topics.requests,
        approval_topic=topics.approvals,
    )
    requests, approvals = [], []
    for topic, key, value, ts, _ in generated.records():
        if topic == topics.requests:
            requests.append((key, value, ts, 0))
        else:
            approvals.append((key, value, ts, 1))
    closing = frame(A, T0 + 120_000, [hit(42, "X", "UP", "Direct", A[2])], 10)
    requests += [(k, v, ts, 0) for k, v, ts, _ in closing[0]]
    approvals += [(k, v, ts, 1) for k, v, ts, _ in closing[1]]
    produce(settings, topics.requests, requests)
    produce(settings, topics.approvals, approvals)

    small = settings.model_copy(update={"max_offsets_per_trigger": 150})
    pipeline = GameSessions(small, str(checkpoint), topics, "streamscale-kafka")
    totals = run(spark, pipeline)

    def records(rows: list[Any]) -> list[Any]:
        return [(k.encode(), v.encode(), ts) for k, v, ts, _ in rows]

    frames = verify.approved_frames(records(requests), records(approvals), 3000)
    expected = verify.expected_sessions(frames, 30_000, exclude_machines=[A[0]])
    written = verify.actual_sessions(
        (r.key, r.value, 0) for r in consume_all(settings, topics.output, 1)
    )
    written = {k: v for k, v in written.items() if k[0] != A[0]}
    result = verify.compare_sessions(expected, written)
    assert result.ok, result.summary()
    # Every pair was made when its window closed: the closing frame's window is still open.
    assert expected and totals["join.approved"] == len(frames) - 1
    assert len(pipeline.counts) > 3  # several micro-batches
