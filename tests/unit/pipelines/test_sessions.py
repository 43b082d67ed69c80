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
from streamscale.pipelines.sessions import Session, close, merge, records, sessions_of

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


# --- merge --------------------------------------------------------------------------------


def merged(spans: Sequence[dict[str, int]]) -> list[Session]:
    return sessions_of(merge(span_table(spans), GAP))


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
    out = merged([{"first_ts": f, "last_ts": last, "frames": 1} for f, last in spans])
    assert [(s.first_ts, s.last_ts) for s in out] == expected
    assert sum(s.counters[0] for s in out) == len(spans)  # every frame counted once


EU_GAME, US_GAME = "IronFist", "SkyRonin"


@pytest.mark.parametrize(
    ("a", "b", "zone"),
    [
        ((0, 50, "EU"), (10, 20, "US"), "EU"),  # a span inside: not the latest
        ((10, 20, "US"), (0, 50, "EU"), "EU"),
        ((0, 10, "EU"), (60, 70, "US"), "US"),
        ((60, 70, "US"), (0, 10, "EU"), "US"),
        ((0, 70, "EU"), (10, 70, "US"), "US"),  # both end last: the later start
    ],
)
def test_merged_session_takes_zone_and_game_of_the_latest_frame(
    a: tuple[int, int, str], b: tuple[int, int, str], zone: str
) -> None:
    def make(first: int, last: int, z: str) -> dict[str, int]:
        game = codec.GAME_CODES[EU_GAME if z == "EU" else US_GAME]
        zone_code = codec.ZONES.index(z)  # type: ignore[arg-type]
        return {"first_ts": first, "last_ts": last, "zone": zone_code, "game": game}

    [one] = merged([make(*a), make(*b)])
    assert (one.zone, one.game) == (zone, EU_GAME if zone == "EU" else US_GAME)


def test_merge_sums_counters_and_maxes_impact() -> None:
    a = {"first_ts": 0, "last_ts": 5, "frames": 2, "n_hits": 3, "impact_sum": 9, "impact_max": 7}
    b = {"first_ts": 6, "last_ts": 9, "frames": 1, "n_hits": 1, "impact_sum": 4, "impact_max": 3}
    [one] = merged([b, a])
    assert one.counters == counters(frames=3, n_hits=4, impact_sum=13)
    assert (one.first_ts, one.last_ts, one.impact_max) == (0, 9, 7)


def python_merge(spans: pa.Table) -> list[Session]:
    """The merge one session at a time, as it was written before it was vectorised."""
    out: list[Session] = []
    by_machine: dict[str, list[Session]] = {}
    for s in sessions_of(spans):
        by_machine.setdefault(s.machine, []).append(s)
    for machine in sorted(by_machine):
        run: list[Session] = []
        for s in sorted(by_machine[machine], key=lambda s: (s.first_ts, s.last_ts)):
            if run and s.first_ts < run[-1].last_ts + GAP:
                top = run[-1]
                latest = s if s.last_ts >= top.last_ts else top
                run[-1] = Session(
                    machine,
                    latest.zone,
                    latest.game,
                    min(top.first_ts, s.first_ts),
                    max(top.last_ts, s.last_ts),
                    tuple(x + y for x, y in zip(top.counters, s.counters, strict=True)),
                    max(top.impact_max, s.impact_max),
                )
            else:
                run.append(s)
        out.extend(run)
    return out


@settings(max_examples=200)
@given(
    st.lists(
        st.tuples(
            st.sampled_from([1, 2, 999_999]),
            st.integers(0, 4 * GAP),
            st.integers(0, GAP),
            st.integers(0, 3),
            st.integers(1, 8),
            st.integers(0, 5),
            st.integers(0, 250),
        ),
        max_size=30,
    )
)
def test_the_vectorised_merge_is_the_merge_one_session_at_a_time(
    rows: list[tuple[int, int, int, int, int, int, int]],
) -> None:
    spans = span_table(
        [
            {
                "machine": m,
                "first_ts": f,
                "last_ts": f + d,
                "zone": z,
                "game": g,
                "frames": n,
                "impact_max": i,
            }
            for m, f, d, z, g, n, i in rows
        ]
    )
    assert sessions_of(merge(spans, GAP)) == python_merge(spans)


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


def reference_value(s: Session, gap_ms: int) -> dict[str, Any]:
    """A session's document as :mod:`streamscale.pipelines.game_sessions` describes it."""
    c = dict(zip(fb.SUMMED, s.counters, strict=True))
    out: dict[str, Any] = {
        "machine": s.machine,
        "zone": s.zone,
        "game": s.game,
        "start": s.first_ts,
        "end": s.last_ts + gap_ms,
        "firstTs": s.first_ts,
        "lastTs": s.last_ts,
        "frames": c["frames"],
        "hits": c["n_hits"],
        "totalImpact": c["impact_sum"],
    }
    if s.impact_max > 0:
        out["maxImpact"] = s.impact_max
    out["impactTypes"] = {t: c[f"type_{t}"] for t in codec.IMPACT_TYPE_CODES}
    out["directions"] = {d: c[f"dir_{d}"] for d in codec.DIRECTION_CODES}
    return out


def test_session_value_json_shape() -> None:
    row = {
        "machine": 42,
        "zone": codec.ZONES.index("ZG"),
        "game": codec.GAME_CODES["IronFist"],
        "first_ts": 1000,
        "last_ts": 3000,
        "frames": 3,
        "approvals": 4,
        "n_hits": 7,
        "n_bad": 1,
        "impact_sum": 812,
        "type_Critical": 1,
        "type_Direct": 4,
        "type_Missed": 2,
        "dir_UP": 3,
        "dir_DOWN": 1,
        "dir_RIGHT": 2,
        "dir_LEFT": 1,
        "impact_max": 201,
    }
    no_hits = {"machine": 42, "first_ts": 5, "frames": 1, "n_bad": 2}
    two = pa.concat_tables([span_table([row]), span_table([no_hits])])  # two chunks
    keys, values = records(two, 30_000)
    assert isinstance(keys, pa.Array) and isinstance(values, pa.Array)
    assert keys.to_pylist() == [b"000042", b"000042"]
    text = values[0].as_py()
    assert b" " not in text
    value = json.loads(text)
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
    other = json.loads(values[1].as_py())
    assert "maxImpact" not in other and other["end"] == 30_005
    assert records(span_table([]), 10) == (pa.array([], pa.binary()), pa.array([], pa.binary()))


@settings(max_examples=100)
@given(
    st.lists(
        st.fixed_dictionaries(
            {
                "machine": st.integers(0, 999_999),
                "zone": st.integers(0, len(codec.ZONES) - 1),
                "game": st.sampled_from(sorted(codec.GAME_CODES.values())),
                "first_ts": st.integers(0, 2**41),
                "impact_max": st.integers(0, 400),
                **{name: st.integers(0, 10**6) for name in fb.SUMMED},
            }
        ),
        max_size=20,
    ),
    st.integers(1, 10**7),
)
def test_records_are_each_sessions_compact_json(rows: list[dict[str, int]], gap: int) -> None:
    table = span_table(rows)
    keys, values = records(table, gap)
    expected = [
        (s.machine.encode(), json.dumps(reference_value(s, gap), separators=(",", ":")).encode())
        for s in sessions_of(table)
    ]
    assert list(zip(keys.to_pylist(), values.to_pylist(), strict=True)) == expected


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
