"""Closing game sessions: session merging, pairing the headers of a closed window, settling
the others, and agreement with the reference sessionizer over a model of the session windows."""

from __future__ import annotations

import json
import random
from collections.abc import Sequence
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streamscale.experiment import verify
from streamscale.pipelines import frame_batches as fb
from streamscale.pipelines import hits as codec
from streamscale.pipelines.sessions import Session, close, merge_sessions, sessions_of

GAP = 100
DELAY = 300
WINDOW = 50


def counters(**values: int) -> tuple[int, ...]:
    return tuple(values.get(name, 0) for name in fb.SUMMED)


def session(
    first: int,
    last: int,
    *,
    frames: int = 1,
    zone: str = "EU",
    game: str = "NeonBrawl",
    impact_max: int = 0,
) -> Session:
    return Session("000001", zone, game, first, last, counters(frames=frames), impact_max)


def span_table(data: Sequence[dict[str, int]]) -> pa.Table:
    """A SPAN_SCHEMA table from partial rows (absent counters: 0; last_ts: first_ts)."""
    full = [
        {
            name: r.get(name, r.get("first_ts", 0) if name == "last_ts" else 0)
            for name in fb.SPAN_SCHEMA.names
        }
        for r in data
    ]
    return pa.Table.from_pylist(full, schema=fb.SPAN_SCHEMA)


def frame(ts: int, machine: int = 1, **more: int) -> dict[str, int]:
    """A frame's header row (game NeonBrawl, zone EU), as a task hands it over unpaired."""
    return {"first_ts": ts, "machine": machine, "game": 1, "frames": 1, **more}


def approval(ts: int, machine: int = 1) -> dict[str, int]:
    return {"first_ts": ts, "machine": machine, "approvals": 1}


# --- merge_sessions ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("spans", "expected"),
    [
        ([(0, 0), (GAP, GAP)], [(0, 0), (GAP, GAP)]),  # exactly a gap after: a new session
        ([(0, 0), (GAP - 1, GAP - 1)], [(0, GAP - 1)]),  # less than a gap: merged
        ([(0, 10), (5, 40)], [(0, 40)]),  # overlapping spans
        ([(0, 10), (GAP + 9, GAP + 20)], [(0, GAP + 20)]),  # they meet
        ([(0, 10), (GAP + 10, GAP + 20)], [(0, 10), (GAP + 10, GAP + 20)]),
        ([(2 * GAP - 50, 2 * GAP - 50), (0, 0), (GAP - 10, GAP - 10)], [(0, 2 * GAP - 50)]),
        ([(500, 600), (0, 50), (1000, 1000)], [(0, 50), (500, 600), (1000, 1000)]),
        ([(0, 300), (10, 20), (350, 350)], [(0, 350)]),  # a span inside another
        ([], []),
    ],
)
def test_merge_sessions_table(
    spans: list[tuple[int, int]], expected: list[tuple[int, int]]
) -> None:
    """Sessions less than a gap apart merge (Spark's session window); sorted by start."""
    merged = merge_sessions([session(f, last) for f, last in spans], GAP)
    assert [(s.first_ts, s.last_ts) for s in merged] == expected
    assert sum(s.counters[0] for s in merged) == len(spans)  # every frame counted once


EU_GAME, US_GAME = "IronFist", "SkyRonin"


@pytest.mark.parametrize(
    ("a", "b", "zone"),
    [
        ((0, 50, "EU"), (10, 20, "US"), "EU"),  # a span inside: not the latest
        ((10, 20, "US"), (0, 50, "EU"), "EU"),
        ((0, 10, "EU"), (60, 70, "US"), "US"),
        ((60, 70, "US"), (0, 10, "EU"), "US"),
    ],
)
def test_merged_session_takes_zone_and_game_of_the_latest_frame(
    a: tuple[int, int, str], b: tuple[int, int, str], zone: str
) -> None:
    def make(first: int, last: int, z: str) -> Session:
        return session(first, last, zone=z, game=EU_GAME if z == "EU" else US_GAME)

    [merged] = merge_sessions([make(*a), make(*b)], GAP)
    assert (merged.zone, merged.game) == (zone, EU_GAME if zone == "EU" else US_GAME)


def test_merge_sums_counters_and_maxes_impact() -> None:
    a = Session("000001", "EU", "NeonBrawl", 0, 5, counters(frames=2, n_hits=3, impact_sum=9), 7)
    b = Session("000001", "EU", "NeonBrawl", 6, 9, counters(frames=1, n_hits=1, impact_sum=4), 3)
    [merged] = merge_sessions([b, a], GAP)
    assert merged.counters == counters(frames=3, n_hits=4, impact_sum=13)
    assert (merged.first_ts, merged.last_ts, merged.impact_max) == (0, 9, 7)


# --- close ---------------------------------------------------------------------------------


def closing(spans: Sequence[dict[str, int]], headers: Sequence[dict[str, int]]) -> Any:
    return close(span_table(spans), span_table(headers), GAP)


def test_headers_of_one_frame_pair_when_their_window_closes() -> None:
    """A frame and its approval read by different tasks (or batches): one session."""
    closed = closing([], [frame(1000, n_hits=2, impact_sum=90), approval(1000)])
    [s] = closed.sessions
    assert (s.machine, s.first_ts, s.last_ts) == ("000001", 1000, 1000)
    assert s.counters == counters(frames=1, approvals=1, n_hits=2, impact_sum=90)
    assert closed.counts == {
        "join.approved": 1,
        "join.duplicate_approvals": 0,
        "join.hits": 2,
        "join.hits_undecodable": 0,
        "join.unapproved": 0,
        "join.late_approvals": 0,
        "sessions.closed": 1,
    }


def test_headers_left_unpaired_are_settled() -> None:
    """A frame without approval is unapproved, an approval without frame late; neither
    makes a session. A second approval of a frame is a duplicate."""
    closed = closing(
        [],
        [frame(100), approval(150, machine=2), frame(300, 3), approval(300, 3), approval(300, 3)],
    )
    assert [(s.machine, s.first_ts) for s in closed.sessions] == [("000003", 300)]
    assert closed.counts["join.unapproved"] == 1
    assert closed.counts["join.late_approvals"] == 1
    assert closed.counts["join.duplicate_approvals"] == 1
    assert closed.counts["join.approved"] == 1


def test_an_unapproved_frame_does_not_bridge_two_sessions() -> None:
    """Spark's window spans every row, an unapproved frame included; the sessions do not."""
    spans = [{**frame(0), "approvals": 1}, {**frame(2 * GAP - 10), "approvals": 1}]
    closed = closing(spans, [frame(GAP - 5)])
    assert [(s.first_ts, s.last_ts) for s in closed.sessions] == [(0, 0), (2 * GAP - 10,) * 2]
    assert closed.counts["join.unapproved"] == 1
    assert closed.counts["sessions.closed"] == 2


def test_task_spans_merge_with_headers_paired_at_close() -> None:
    spans = [{**frame(GAP - 1), "last_ts": GAP + 30, "frames": 3}]
    [s] = closing(spans, [frame(0), approval(0)]).sessions
    assert (s.first_ts, s.last_ts, s.counters[0]) == (0, GAP + 30, 4)


def test_nothing_to_close() -> None:
    closed = closing([], [])
    assert closed.sessions == [] and closed.counts["sessions.closed"] == 0


def test_session_value_json_shape() -> None:
    c = counters(
        frames=3,
        approvals=4,
        n_hits=7,
        n_bad=1,
        impact_sum=812,
        type_Critical=1,
        type_Direct=4,
        type_Missed=2,
        dir_UP=3,
        dir_DOWN=1,
        dir_RIGHT=2,
        dir_LEFT=1,
    )
    s = Session("000042", "ZG", "IronFist", 1000, 3000, c, 201)
    value = s.value(30_000)
    assert value == {
        "machine": "000042",
        "zone": "ZG",
        "game": "IronFist",
        "start": 1000,
        "end": 33_000,
        "firstTs": 1000,
        "lastTs": 3000,
        "frames": 3,
        "hits": 7,
        "totalImpact": 812,
        "maxImpact": 201,
        "impactTypes": {"Fatal": 0, "Critical": 1, "Special": 0, "Direct": 4, "Missed": 2},
        "directions": {"UP": 3, "DOWN": 1, "RIGHT": 2, "LEFT": 1},
    }
    assert list(value)[-3:] == ["maxImpact", "impactTypes", "directions"]  # documented order
    assert list(value["impactTypes"]) == list(codec.IMPACT_TYPE_CODES)
    assert list(value["directions"]) == list(codec.DIRECTION_CODES)
    no_hits = Session("000042", "ZG", "IronFist", 5, 5, counters(frames=1, n_bad=2), 0)
    assert "maxImpact" not in no_hits.value(10)
    assert no_hits.value(10)["end"] == 15
    key, text = s.record(30_000)
    assert key == b"000042"
    assert b" " not in text and json.loads(text) == value


def test_sessions_of_spans_names_machine_zone_and_game() -> None:
    table = span_table(
        [
            {**frame(5, machine=42, zone=3, game=8), "last_ts": 9, "impact_max": 50},
            {**approval(7, machine=123456), "zone": 1},
        ]
    )
    a, b = sessions_of(table)
    assert (a.machine, a.zone, a.game, a.first_ts, a.last_ts, a.impact_max) == (
        "000042",
        "AU",
        "ShadowBlade",
        5,
        9,
        50,
    )
    assert (b.machine, b.zone, b.game) == ("123456", "US", "")  # game 0: only approvals


# --- a whole run, against the reference sessionizer ---------------------------------------

MACHINES = {
    "100001": ("EU", "NeonBrawl"),
    "100002": ("US", "IronFist"),
    "100003": ("AU", "SkyRonin"),
}
FAR = "999999"


def kafka_batch(records: Sequence[tuple[bytes, bytes, int]], topic: str) -> pa.RecordBatch:
    n = len(records)
    return pa.RecordBatch.from_arrays(
        [
            pa.array([k for k, _, _ in records], pa.binary()),
            pa.array([v for _, v, _ in records], pa.binary()),
            pa.array([topic] * n, pa.string()),
            pa.array([0] * n, pa.int32()),
            pa.array(range(n), pa.int64()),
            pa.array([t * 1000 for _, _, t in records], pa.timestamp("us", tz="UTC")),
        ],
        names=["key", "value", "topic", "partition", "offset", "timestamp"],
    )


def run_task(
    frames: Sequence[tuple[bytes, bytes, int]], approvals: Sequence[tuple[bytes, bytes, int]]
) -> tuple[pa.Table, pa.Table, dict[str, int]]:
    """What one Spark task of the pipeline does with its records (as game_sessions)."""
    out = fb.Frames()
    fb.read_frames(kafka_batch(frames, "RQ"), out)
    fb.read_approvals(kafka_batch(approvals, "RS"), out, WINDOW)
    paired = fb.pair(out.frames + out.approvals)
    counts = dict(out.counts)
    for name, n in paired.counts.items():
        counts[name] = counts.get(name, 0) + n
    return fb.spans(paired.approved, GAP), paired.unpaired, counts


def spark_windows(rows: pa.Table) -> list[pa.Table]:
    """A model of the session windows (``SessionWindows``, as Spark's ``session_window``) with
    the pipeline's per-row gap: per machine, rows whose ``[first_ts, last_ts + gap)`` overlap
    are in one window."""
    windows: list[pa.Table] = []
    by_machine: dict[int, list[dict[str, Any]]] = {}
    for r in rows.to_pylist():
        by_machine.setdefault(r["machine"], []).append(r)
    for machine in sorted(by_machine):
        group: list[dict[str, Any]] = []
        end = None
        for r in sorted(by_machine[machine], key=lambda r: r["first_ts"]):
            if end is not None and r["first_ts"] >= end:
                windows.append(pa.Table.from_pylist(group, schema=rows.schema))
                group, end = [], None
            group.append(r)
            end = max(end or 0, r["last_ts"] + GAP)
        windows.append(pa.Table.from_pylist(group, schema=rows.schema))
    return windows


hit_lists = st.lists(
    st.builds(
        codec.Hit,
        impact=st.integers(codec.IMPACT_MIN, codec.IMPACT_MAX),
        key=st.sampled_from(list(codec.KEY_CODES)),
        direction=st.sampled_from(list(codec.DIRECTION_CODES)),
        impact_type=st.sampled_from(list(codec.IMPACT_TYPE_CODES)),
        level=st.just("Pro"),
        game=st.just("NeonBrawl"),
    ).map(codec.encode_hit),
    min_size=1,
    max_size=3,
)


@settings(max_examples=30)
@given(
    st.dictionaries(
        st.tuples(st.sampled_from(sorted(MACHINES)), st.integers(0, 3000)),
        st.tuples(hit_lists, st.sampled_from(["none", "in", "in", "in", "late"])),
        min_size=1,
        max_size=60,
    ),
    st.randoms(use_true_random=False),
)
def test_tasks_and_closed_windows_give_the_reference_sessions(
    frames: dict[tuple[str, int], tuple[list[str], str]], rng: random.Random
) -> None:
    """Approved frames of a few machines, cut into random micro-batches of 1-2 tasks (an
    approval in its frame's batch or the next, in the same task or not); what the tasks hand
    over is kept in windows as the operator keeps them (:func:`spark_windows`) and each is closed.
    The sessions are exactly :func:`streamscale.experiment.verify.expected_sessions`, each once."""
    requests: list[tuple[bytes, bytes, int, int]] = []  # key, value, timestamp, batch
    approvals: list[tuple[bytes, bytes, int, int]] = []
    batch, batch_start = 0, None
    for machine, ts in sorted(frames, key=lambda f: (f[1], f[0])):
        hits, approved = frames[machine, ts]
        zone, game = MACHINES[machine]
        key = codec.header_json(codec.FrameHeader(ts, machine, zone)).encode()  # type: ignore[arg-type]
        game_hex = f"{codec.GAME_CODES[game]:02X}"
        value = codec.body_json(codec.FrameBody(game, tuple(h[:6] + game_hex for h in hits)))
        if batch_start is not None and (ts - batch_start >= DELAY or rng.random() < 0.2):
            batch, batch_start = batch + 1, None
        if batch_start is None:
            batch_start = ts
        requests.append((key, value.encode(), ts, batch))
        if approved != "none":
            stamp = ts + (rng.randint(0, WINDOW) if approved == "in" else WINDOW + 1)
            approvals.append((key, value.encode(), stamp, batch + rng.randint(0, 1)))
    far_ts = max(ts for _, ts in frames) + GAP + DELAY + 1
    far_key = codec.header_json(codec.FrameHeader(far_ts, FAR, "EU")).encode()
    far_value = codec.body_json(codec.FrameBody("NeonBrawl", ("64114101",))).encode()
    last_batch = batch + 2
    requests.append((far_key, far_value, far_ts, last_batch))
    approvals.append((far_key, far_value, far_ts, last_batch))

    spans, unpaired = [], []
    totals: dict[str, int] = {}
    for b in range(last_batch + 1):
        tasks: list[tuple[list[Any], list[Any]]] = [([], []), ([], [])]
        for source, side in ((requests, 0), (approvals, 1)):
            for k, v, t, at in source:
                if at == b:
                    tasks[rng.randint(0, 1)][side].append((k, v, t))
        for task_frames, task_approvals in tasks:
            s, u, counts = run_task(task_frames, task_approvals)
            spans.append(s)
            unpaired.append(u)
            for name, n in counts.items():
                totals[name] = totals.get(name, 0) + n
    kinds = ["span"] * sum(t.num_rows for t in spans) + ["header"] * sum(
        t.num_rows for t in unpaired
    )
    rows = pa.concat_tables([*spans, *unpaired])
    closed: list[Session] = []
    for window in spark_windows(rows.append_column("kind", pa.array(kinds))):
        is_span = pa.compute.equal(window.column("kind"), "span")
        result = close(
            window.filter(is_span).drop(["kind"]),
            window.filter(pa.compute.invert(is_span)).drop(["kind"]),
            GAP,
        )
        closed.extend(s for s in result.sessions if s.machine != FAR)
        for name, n in result.counts.items():
            if not name.startswith("sessions."):
                totals[name] = totals.get(name, 0) + n

    expected = verify.expected_sessions(
        verify.approved_frames(
            [(k, v, t) for k, v, t, _ in requests], [(k, v, t) for k, v, t, _ in approvals], WINDOW
        ),
        GAP,
        exclude_machines=[FAR],
    )
    got = {
        (s.machine, s.first_ts, s.last_ts + GAP): verify.SessionFigures(
            s.counters[fb.SUMMED.index("frames")],
            s.counters[fb.SUMMED.index("n_hits")],
            s.counters[fb.SUMMED.index("impact_sum")],
        )
        for s in closed
    }
    assert len(got) == len(closed)  # each session closed once
    assert got == expected
    for s in closed:
        assert (s.zone, s.game) == MACHINES[s.machine]
    n_approved = sum(f.frames for f in expected.values())
    assert totals["join.approved"] == n_approved + 1
    assert totals.get("join.unapproved", 0) == len(requests) - 1 - n_approved
    late = sum(1 for _, approved in frames.values() if approved == "late")
    assert totals["join.late_approvals"] == late


def test_game_sessions_refuse_a_state_store_without_transform_with_state() -> None:
    from streamscale.errors import ConfigError
    from streamscale.pipelines.game_sessions import GameSessions
    from streamscale.settings import Settings

    with pytest.raises(ConfigError, match="STREAMSCALE_STATE_STORE=rocksdb"):
        GameSessions(Settings(state_store="hdfs"), "/tmp/unused")
