"""The driver's half of game sessions: session merging, the watermark, the state's bytes,
pairing across batches, settling, closing, and agreement with the reference sessionizer."""

from __future__ import annotations

import json
import random
from collections.abc import Sequence
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streamscale import verify
from streamscale.pipelines import frame_batches as fb
from streamscale.pipelines import hits as codec
from streamscale.pipelines.sessions import (
    STATE_VERSION,
    Session,
    State,
    advance,
    merge_sessions,
    sessions_of,
)

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


def step(state: State, unpaired: Sequence[dict[str, int]], **max_ts: int) -> Any:
    return advance(state, [], [span_table(unpaired)], max_ts, gap_ms=GAP, delay_ms=DELAY)


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


# --- State --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("max_ts", "delay", "expected"),
    [
        ({}, 10, None),
        ({"frames": 100}, 10, 90),
        ({"frames": 100, "approvals": 50}, 10, 40),  # the slower input holds it back
        ({"frames": 100, "approvals": 500}, 0, 100),
    ],
)
def test_watermark(max_ts: dict[str, int], delay: int, expected: int | None) -> None:
    assert State(max_ts=max_ts).watermark(delay) == expected


def test_state_bytes_round_trip() -> None:
    """Pending headers, open sessions and newest ts survive the checkpoint's bytes."""
    state = State(
        span_table([frame(10, impact_max=7, n_hits=2), approval(20, machine=999_999)]),
        (
            Session("000001", "EU", "NeonBrawl", 0, 5, counters(frames=2, dir_UP=1), 9),
            Session("999999", "AU", "", 3, 3, counters(approvals=1), 0),
        ),
        {"frames": 10, "approvals": 20},
    )
    data = state.to_bytes()
    back = State.from_bytes(data)
    assert back.pending.equals(state.pending)
    assert back.pending.schema == fb.SPAN_SCHEMA
    assert back.open == state.open
    assert dict(back.max_ts) == {"frames": 10, "approvals": 20}
    assert back.to_bytes() == data
    empty = State.from_bytes(State().to_bytes())
    assert (empty.pending.num_rows, empty.open, dict(empty.max_ts)) == (0, (), {})
    assert empty.watermark(DELAY) is None


def test_state_of_another_version_is_refused() -> None:
    meta = {"version": STATE_VERSION + 1, "max_ts": {}, "open": []}
    table = fb.SPAN_SCHEMA.empty_table().replace_schema_metadata(
        {b"streamscale.sessions": json.dumps(meta).encode()}
    )
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    with pytest.raises(ValueError, match="version"):
        State.from_bytes(sink.getvalue().to_pybytes())


# --- advance ------------------------------------------------------------------------------


def test_a_frame_pending_in_one_batch_pairs_with_an_approval_in_the_next() -> None:
    first = step(State(), [frame(1000, n_hits=2, impact_sum=90)], frames=1000)
    assert first.watermark == 1000 - DELAY
    assert first.closed == [] and first.state.open == ()
    assert (
        first.state.pending.to_pylist()
        == span_table([frame(1000, n_hits=2, impact_sum=90)]).to_pylist()
    )
    assert (first.counts["now.pending_frames"], first.counts["now.pending_approvals"]) == (1, 0)
    assert first.counts["join.approved"] == 0
    second = step(first.state, [approval(1000), approval(1200, machine=2)], approvals=1200)
    assert second.watermark == 1000 - DELAY  # min(1000, 1200) - delay
    assert second.counts["join.approved"] == 1
    assert (second.counts["now.pending_frames"], second.counts["now.pending_approvals"]) == (0, 1)
    [open_session] = second.state.open
    assert (open_session.machine, open_session.first_ts, open_session.last_ts) == (
        "000001",
        1000,
        1000,
    )
    assert open_session.counters == counters(frames=1, approvals=1, n_hits=2, impact_sum=90)
    assert second.state.max_ts == {"frames": 1000, "approvals": 1200}


def test_headers_the_watermark_passes_are_settled() -> None:
    """Unpaired headers with ts < watermark: frames unapproved, approvals late; the others
    wait (a header at the watermark itself included)."""
    pending = [
        frame(100),
        approval(150, machine=2),
        frame(300, machine=3),
        approval(400, machine=4),
    ]
    first = step(State(), pending)
    assert first.watermark is None and first.state.pending.num_rows == 4
    assert "join.unapproved" not in first.counts
    second = step(first.state, [], frames=600, approvals=700)
    assert second.watermark == 300
    assert second.counts["join.unapproved"] == 1
    assert second.counts["join.late_approvals"] == 1
    assert sorted(second.state.pending.column("first_ts").to_pylist()) == [300, 400]
    assert (second.counts["now.pending_frames"], second.counts["now.pending_approvals"]) == (1, 1)
    assert second.closed == [] and second.state.open == ()


@pytest.mark.parametrize(
    ("newest", "closed"), [(DELAY + 1000 + GAP - 1, False), (DELAY + 1000 + GAP, True)]
)
def test_a_session_closes_when_the_watermark_reaches_its_end(newest: int, closed: bool) -> None:
    """Closed when last_ts + gap <= watermark; returned once and not kept."""
    opened = step(
        State(),
        [frame(950), approval(950), frame(1000), approval(1000)],
        frames=1000,
        approvals=1000,
    )
    assert opened.counts["now.open_sessions"] == 1
    moved = step(opened.state, [], frames=newest, approvals=newest)
    assert bool(moved.closed) is closed
    assert len(moved.state.open) == int(not closed)
    assert moved.counts["sessions.closed"] == int(closed)
    if closed:
        [s] = moved.closed
        assert (s.first_ts, s.last_ts, s.counters[0]) == (950, 1000, 2)
        again = step(moved.state, [], frames=newest + 10_000, approvals=newest + 10_000)
        assert again.closed == [] and again.state.open == ()


def test_task_spans_merge_with_open_sessions() -> None:
    opened = step(State(), [frame(0), approval(0)], frames=0, approvals=0)
    spans = [span_table([{**frame(GAP - 1), "last_ts": GAP + 30, "frames": 3}])]
    later = advance(opened.state, spans, [], {"frames": 5000}, gap_ms=GAP, delay_ms=DELAY)
    [s] = later.state.open  # approvals still hold the watermark back at -DELAY
    assert (s.first_ts, s.last_ts, s.counters[0]) == (0, GAP + 30, 4)


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
    frames: Sequence[tuple[bytes, bytes, int]],
    approvals: Sequence[tuple[bytes, bytes, int]],
    late_before: int | None,
) -> tuple[pa.Table, pa.Table, dict[str, int], dict[str, int]]:
    """What one Spark task of the pipeline does with its records (as game_sessions)."""
    out = fb.Frames()
    fb.read_frames(kafka_batch(frames, "RQ"), out, late_before)
    fb.read_approvals(kafka_batch(approvals, "RS"), out, WINDOW, late_before)
    paired = fb.pair(out.frames + out.approvals)
    counts = dict(out.counts)
    for name, n in paired.counts.items():
        counts[name] = counts.get(name, 0) + n
    return fb.spans(paired.approved, GAP), paired.unpaired, counts, out.max_ts


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
def test_advance_over_random_batches_gives_the_reference_sessions(
    frames: dict[tuple[str, int], tuple[list[str], str]], rng: random.Random
) -> None:
    """Approved frames of a few machines, cut into random micro-batches of 1-2 tasks (an
    approval in its frame's batch or the next, in the same task or not), the state through
    its bytes between batches; a last far-ahead frame closes everything. The closed
    sessions are exactly :func:`streamscale.verify.expected_sessions`, each closed once."""
    # A batch spans less than the watermark delay and an approval comes at most one batch
    # after its frame: no record is ever behind the watermark, every frame is paired or not.
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

    state = State()
    closed: list[Session] = []
    totals: dict[str, int] = {}
    for b in range(last_batch + 1):
        tasks: list[tuple[list[Any], list[Any]]] = [([], []), ([], [])]
        for source, side in ((requests, 0), (approvals, 1)):
            for k, v, t, at in source:
                if at == b:
                    tasks[rng.randint(0, 1)][side].append((k, v, t))
        late_before = state.watermark(DELAY)
        spans, unpaired, max_ts = [], [], dict[str, int]()
        for task_frames, task_approvals in tasks:
            s, u, counts, newest = run_task(task_frames, task_approvals, late_before)
            spans.append(s)
            unpaired.append(u)
            for name, n in counts.items():
                totals[name] = totals.get(name, 0) + n
            for name, ts in newest.items():
                max_ts[name] = max(max_ts.get(name, ts), ts)
        result = advance(state, spans, unpaired, max_ts, gap_ms=GAP, delay_ms=DELAY)
        for s in result.closed:
            assert result.watermark is not None and s.last_ts + GAP <= result.watermark
        closed.extend(result.closed)
        for name, n in result.counts.items():
            if not name.startswith(("pending.", "sessions.")):
                totals[name] = totals.get(name, 0) + n
        state = State.from_bytes(result.state.to_bytes())

    assert totals["join.late_frames"] == 0  # by construction: every record is in time
    assert state.pending.num_rows == 0
    assert [s.machine for s in state.open] == [FAR]
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
