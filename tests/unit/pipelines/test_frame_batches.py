"""Arrow batches of game frames: the vectorized parsing agrees with the row-by-row checks,
every record is used or dead-lettered with the right reason, pairing and spans keep the sums."""

from __future__ import annotations

import contextlib
import json
import random
from collections import Counter
from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_hits import hits as hit_objects

from streamscale.experiment import verify
from streamscale.generate.game_frames import GameFrames
from streamscale.generate.profiles import make_schedule
from streamscale.pipelines import deadletter as dl
from streamscale.pipelines import frame_batches as fb
from streamscale.pipelines import hits as codec
from streamscale.pipelines.hits import (
    DIRECTION_CODES,
    GAMES,
    IMPACT_TYPE_CODES,
    ZONES,
    FrameBody,
    FrameHeader,
    Hit,
    body_json,
    encode_hit,
    header_json,
)

START = 1_767_225_600_000
WINDOW_MS = 3000
HIT = encode_hit(Hit(100, "X", "UP", "Direct", "Pro", "NeonBrawl"))  # 64114101
STATS = (*fb.SUMMED[2:], "impact_max")

Raw = bytes | str | None


def _bytes(data: Raw) -> bytes | None:
    return data.encode() if isinstance(data, str) else data


def kafka_batch(
    records: Sequence[tuple[Raw, Raw, int]], topic: str = "RQ", partition: int = 0
) -> pa.RecordBatch:
    """A batch with the source's columns from ``(key, value, timestamp_ms)``; offset = index."""
    n = len(records)
    return pa.RecordBatch.from_arrays(
        [
            pa.array([_bytes(k) for k, _, _ in records], pa.binary()),
            pa.array([_bytes(v) for _, v, _ in records], pa.binary()),
            pa.array([topic] * n, pa.string()),
            pa.array([partition] * n, pa.int32()),
            pa.array(range(n), pa.int64()),
            pa.array([t * 1000 for _, _, t in records], pa.timestamp("us", tz="UTC")),
        ],
        names=["key", "value", "topic", "partition", "offset", "timestamp"],
    )


def key(ts: int, machine: str = "123456", zone: str = "EU") -> str:
    return header_json(FrameHeader(ts, machine, zone))  # type: ignore[arg-type]


def body(*hits: object, game: str = "NeonBrawl") -> str:
    return json.dumps({"game": game, "hits": list(hits)}, separators=(",", ":"))


def hit_stats(hits: Sequence[object]) -> dict[str, int]:
    """Reference per-frame statistics, one :func:`.hits.decode_hit` call per hit."""
    decoded = []
    for h in hits:
        with contextlib.suppress(codec.HitDecodeError):
            decoded.append(codec.decode_hit(h))
    out = {
        "n_hits": len(decoded),
        "n_bad": len(hits) - len(decoded),
        "impact_sum": sum(h.impact for h in decoded),
        "impact_max": max((h.impact for h in decoded), default=0),
    }
    for t in IMPACT_TYPE_CODES:
        out[f"type_{t}"] = sum(h.impact_type == t for h in decoded)
    for d in DIRECTION_CODES:
        out[f"dir_{d}"] = sum(h.direction == d for h in decoded)
    return out


def frame_row(header: FrameHeader, game: str, hits: Sequence[object]) -> dict[str, int]:
    """The SPAN_SCHEMA row that :func:`.frame_batches.read_frames` should give a frame."""
    return {
        "machine": int(header.machine),
        "zone": ZONES.index(header.zone),
        "game": codec.GAME_CODES[game],
        "first_ts": header.ts,
        "last_ts": header.ts,
        "frames": 1,
        "approvals": 0,
        **hit_stats(hits),
    }


def rows(tables: Sequence[pa.Table]) -> list[dict[str, int]]:
    """The rows of span tables, sorted by (ts, machine, zone)."""
    table = pa.concat_tables([fb.SPAN_SCHEMA.empty_table(), *tables])
    return sorted(table.to_pylist(), key=lambda r: (r["first_ts"], r["machine"], r["zone"]))


def span_table(data: Sequence[dict[str, int]]) -> pa.Table:
    """A SPAN_SCHEMA table from partial rows (absent counters: 0)."""
    full = [{name: r.get(name, 0) for name in fb.SPAN_SCHEMA.names} for r in data]
    return pa.Table.from_pylist(full, schema=fb.SPAN_SCHEMA)


valid_hits = hit_objects.map(encode_hit)
any_hex8 = st.text("0123456789abcdefABCDEF", min_size=8, max_size=8)
hit_texts = st.one_of(valid_hits, valid_hits.map(str.lower), any_hex8)
headers = st.builds(
    FrameHeader,
    ts=st.integers(0, 10**18 - 1),
    machine=st.integers(0, 999_999).map(fb.machine_text),
    zone=st.sampled_from(ZONES),
)


# --- parse_keys ----------------------------------------------------------------------------


@settings(max_examples=60)
@given(st.lists(headers, min_size=1, max_size=30))
def test_parse_keys_reads_canonical_keys_exactly(hs: list[FrameHeader]) -> None:
    """Every key in the generator's compact form is parsed on the fast path, to its values."""
    ts, machine, zone, ok = fb.parse_keys(pa.array([header_json(h).encode() for h in hs]))
    assert ok.all()
    assert ts.tolist() == [h.ts for h in hs]
    assert machine.tolist() == [int(h.machine) for h in hs]
    assert zone.tolist() == [ZONES.index(h.zone) for h in hs]


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (b'{"ts": 1,"machine":"123456","zone":"EU"}', FrameHeader(1, "123456", "EU")),
        (b'{"machine":"123456","ts":1,"zone":"EU"}', FrameHeader(1, "123456", "EU")),
        (b'{"ts":1,"machine":"123456","zone":"EU"} ', FrameHeader(1, "123456", "EU")),
        (b'{"ts":1,"machine":"123456","zone":"EU","x":0}', FrameHeader(1, "123456", "EU")),
        (b'{"ts":1,"machine":"1234\\u0035\\u0036","zone":"EU"}', FrameHeader(1, "123456", "EU")),
        (b'{"ts":1234567890123456789,"machine":"123456","zone":"EU"}', None),  # 19 digits
        (b'{"ts":01,"machine":"123456","zone":"EU"}', dl.NOT_JSON),  # leading zero
        (b'{"ts":00,"machine":"123456","zone":"EU"}', dl.NOT_JSON),
        (b'{"ts":-1,"machine":"123456","zone":"EU"}', dl.INVALID_VALUE),  # a 2-digit length
        (b'{"ts":12,"machine":"12345","zone":"EU"}', dl.INVALID_VALUE),  # a 1-digit length
        (b'{"ts":1,"machine":"12345a","zone":"EU"}', dl.INVALID_VALUE),
        (b'{"ts":1,"machine":"123456","zone":"XX"}', dl.INVALID_VALUE),
        (b'{"ts":1,"machine":"123456","zone":"eu"}', dl.INVALID_VALUE),
        (b'{"ts":1,"machine":"12345\xff","zone":"EU"}', dl.NOT_JSON),  # invalid UTF-8
        (b'{"ts":1.5,"machine":"123456","zone":"EU"}', dl.WRONG_TYPE),
        (b'{"ts":"1","machine":"123456","zone":"EU"}', dl.WRONG_TYPE),
        (b'{"ts":1,"machine":123456,"zone":"EU"}', dl.WRONG_TYPE),
        (b'{"ts":99999999999999999999,"machine":"123456","zone":"EU"}', dl.WRONG_TYPE),
        (b'{"TS":1,"machine":"123456","zone":"EU"}', dl.MISSING_FIELD),
        (b"", dl.NOT_JSON),
        (b"[1]", dl.NOT_JSON),
        (None, dl.NULL_KEY),
    ],
)
def test_non_canonical_keys_are_left_to_check_header(
    raw: bytes | None, expected: FrameHeader | str | None
) -> None:
    """The fast path never guesses: anything but the compact form is ``ok=False``, and the
    checked path reads it (or names its error)."""
    _, _, _, ok = fb.parse_keys(pa.array([raw, key(7).encode()], pa.binary()))
    assert ok.tolist() == [False, True]
    if isinstance(expected, str):
        with pytest.raises(dl.Refused) as refused:
            fb.check_header(raw)
        assert refused.value.error == expected
    elif expected is not None:
        assert fb.check_header(raw) == expected
    else:
        assert fb.check_header(raw).ts == 1234567890123456789


@settings(max_examples=80)
@given(
    headers,
    st.lists(
        st.tuples(st.integers(0, 80), st.integers(0, 255), st.sampled_from(["set", "ins", "del"])),
        min_size=1,
        max_size=3,
    ),
)
def test_parse_keys_never_gives_a_wrong_value(
    header: FrameHeader, edits: list[tuple[int, int, str]]
) -> None:
    """A key with a few bytes changed, inserted or deleted: when the fast path accepts it,
    the checked path reads the same values, and it accepts exactly the canonical keys."""
    raw = bytearray(header_json(header).encode())
    for at, byte, how in edits:
        at %= len(raw) + (how == "ins")
        if how == "set":
            raw[at] = byte
        elif how == "ins":
            raw.insert(at, byte)
        elif len(raw) > 1:
            del raw[at]
    ts, machine, zone, ok = fb.parse_keys(pa.array([bytes(raw)], pa.binary()))
    try:
        checked = fb.check_header(bytes(raw))
    except dl.Refused:
        checked = None
    canonical = checked is not None and header_json(checked).encode() == bytes(raw)
    assert bool(ok[0]) == canonical
    if ok[0]:
        assert checked == FrameHeader(int(ts[0]), fb.machine_text(machine[0]), ZONES[zone[0]])


def test_parse_keys_of_a_sliced_column_with_nulls() -> None:
    """Offsets of a sliced Arrow array and null rows are honoured."""
    column = pa.array([key(1).encode(), None, key(22, "000042", "AU").encode(), b"x"]).slice(1)
    ts, machine, zone, ok = fb.parse_keys(column)
    assert ok.tolist() == [False, True, False]
    assert (ts[1], machine[1], zone[1]) == (22, 42, ZONES.index("AU"))


# --- decode_hit_texts ----------------------------------------------------------------------


@settings(max_examples=80)
@given(st.lists(st.lists(hit_texts, min_size=1, max_size=5), min_size=1, max_size=20))
def test_decode_hit_texts_agrees_with_decode_hit(frames: list[list[str]]) -> None:
    """Per-frame counts, impact sum and max, type and direction counts of the decodable
    hits, and the number of the others, as the row-wise codec decides them."""
    stats = fb.decode_hit_texts(pa.array(['","'.join(hs) for hs in frames], pa.string()))
    assert set(stats) == set(STATS) - {"frames", "approvals"}
    for i, hs in enumerate(frames):
        assert {name: int(column[i]) for name, column in stats.items()} == hit_stats(hs)


def test_decode_hit_texts_known_vector() -> None:
    texts = pa.array([f'{HIT}","D1223201","ff114101', "2a114101"], pa.string())
    stats = fb.decode_hit_texts(texts)
    assert stats["n_hits"].tolist() == [2, 1]
    assert stats["n_bad"].tolist() == [1, 0]  # impact 255
    assert stats["impact_sum"].tolist() == [100 + 209, 42]
    assert stats["impact_max"].tolist() == [209, 42]
    assert stats["type_Direct"].tolist() == [1, 1]
    assert stats["type_Special"].tolist() == [1, 0]
    assert stats["dir_UP"].tolist() == [1, 1]
    assert stats["dir_DOWN"].tolist() == [1, 0]


# --- read_frames: dead letters, one record at a time ----------------------------------------


@pytest.mark.parametrize(
    ("raw_key", "value", "error", "detail"),
    [
        ("frame " + key(1), body(HIT), dl.NOT_JSON, "frame key is not a JSON object"),
        (None, body(HIT), dl.NULL_KEY, "frame key is null"),
        ('{"ts":"1","machine":"123456","zone":"EU"}', body(HIT), dl.WRONG_TYPE, "wrong type"),
        ('{"ts":true,"machine":"123456","zone":"EU"}', body(HIT), dl.WRONG_TYPE, "wrong type"),
        ('{"ts":1,"zone":"EU"}', body(HIT), dl.MISSING_FIELD, "frame key has no machine"),
        ('{"ts":1,"machine":null,"zone":"EU"}', body(HIT), dl.MISSING_FIELD, "has no machine"),
        (key(1, zone="XX"), body(HIT), dl.INVALID_VALUE, "unknown zone"),
        ('{"ts":-5,"machine":"123456","zone":"EU"}', body(HIT), dl.INVALID_VALUE, "negative"),
        (key(1), body(HIT)[:20], dl.NOT_JSON, "frame body is not a JSON object"),
        (key(1), b"\xff\xfe", dl.NOT_JSON, "frame body is not a JSON object"),
        (key(1), '{"game":"NeonBrawl"}', dl.MISSING_FIELD, "frame body has no hits"),
        (key(1), f'{{"game":"NeonBrawl","hits":"{HIT}"}}', dl.WRONG_TYPE, "wrong type"),
        (key(1), f'{{"game":7,"hits":["{HIT}"]}}', dl.WRONG_TYPE, "wrong type"),
        (key(1), body(HIT, game="Pong"), dl.INVALID_VALUE, "unknown game"),
        (key(1), body(), dl.INVALID_VALUE, "not 1-5 hits"),
        (key(1), body(*[HIT] * 6), dl.INVALID_VALUE, "not 1-5 hits"),
        (key(1), None, dl.NULL_VALUE, "frame body is null"),
    ],
)
def test_unusable_frames_are_dead_lettered_with_their_error(
    raw_key: Raw, value: Raw, error: str, detail: str
) -> None:
    """One bad record next to a good one: the bad one is dead-lettered (original bytes,
    error, detail, source position) and counted per error; the good one goes on."""
    out = fb.Frames()
    fb.read_frames(kafka_batch([(key(9), body(HIT), 9), (raw_key, value, 5)], "RQ", 3), out)
    [letter] = out.dead
    assert (letter.key, letter.value) == (_bytes(raw_key), _bytes(value))
    assert (letter.topic, letter.partition, letter.offset) == ("RQ", 3, 1)
    assert letter.error == error
    assert detail in letter.detail
    assert out.counts["frames.records"] == 2
    assert out.counts["frames_dlq.records"] == 1
    assert out.counts[f"frames_dlq.{error}"] == 1
    assert out.counts["hits_dlq.frames"] == 0
    assert [r["first_ts"] for r in rows(out.frames)] == [9]


@pytest.mark.parametrize(
    ("hits", "detail", "n_hits"),
    [
        ([HIT, "FF114101"], "undecodable hit(s): hit 1 FF114101 (impact)", 1),
        (["ZZ", HIT, "2A014101"], "undecodable hit(s): hit 0 ZZ (length), hit 2 2A014101 (key)", 1),
        ([HIT, "2A11G101"], "undecodable hit(s): hit 1 2A11G101 (hex)", 1),
        ([5, HIT], "undecodable hit(s): hit 0 5 (type)", 1),
        ([["x"]], 'undecodable hit(s): hit 0 ["x"] (type)', 0),
        (["6411410F"], "undecodable hit(s): hit 0 6411410F (game)", 0),
    ],
)
def test_frames_with_undecodable_hits_are_dead_lettered_and_kept(
    hits: list[object], detail: str, n_hits: int
) -> None:
    """Such a frame is dead-lettered once (counted under hits_dlq, not frames_dlq) and goes
    on with its decodable hits."""
    out = fb.Frames()
    fb.read_frames(kafka_batch([(key(1), body(*hits), 1)]), out)
    [letter] = out.dead
    assert (letter.error, letter.detail) == (dl.UNDECODABLE_HIT, detail)
    assert out.counts["frames_dlq.records"] == 0
    assert dl.UNDECODABLE_HIT not in {k.split(".")[-1] for k in out.counts}
    assert out.counts["hits_dlq.frames"] == 1
    assert out.counts["hits_dlq.hits"] == len(hits) - n_hits
    [row] = rows(out.frames)
    assert row == frame_row(FrameHeader(1, "123456", "EU"), "NeonBrawl", hits)
    assert (row["frames"], row["n_hits"], row["n_bad"]) == (1, n_hits, len(hits) - n_hits)


def test_counts_always_reported_and_empty_batches_ignored() -> None:
    out = fb.Frames()
    fb.read_frames(kafka_batch([]), out)
    fb.read_approvals(kafka_batch([], "RS"), out, WINDOW_MS)
    assert out.counts == dict.fromkeys(fb.ALWAYS_COUNTED, 0)
    assert (out.frames, out.approvals, out.dead) == ([], [], [])


@settings(max_examples=40)
@given(
    st.lists(
        st.tuples(headers, st.sampled_from(GAMES), st.lists(hit_texts, min_size=1, max_size=5)),
        min_size=1,
        max_size=10,
    )
)
def test_fast_and_checked_paths_give_the_same_frames(
    frames: list[tuple[FrameHeader, str, list[str]]],
) -> None:
    """The same frames in the compact form and re-spaced with keys reordered (the checked
    path): the same rows, the same dead letters."""
    compact = [(header_json(h), body_json(FrameBody(g, tuple(hs))), 0) for h, g, hs in frames]
    spaced = [
        (
            json.dumps({"zone": h.zone, "machine": h.machine, "ts": h.ts}),
            json.dumps({"hits": hs, "game": g}, indent=1),
            0,
        )
        for h, g, hs in frames
    ]
    fast, checked = fb.Frames(), fb.Frames()
    fb.read_frames(kafka_batch(compact), fast)
    fb.read_frames(kafka_batch(spaced), checked)
    assert rows(fast.frames) == rows(checked.frames)
    assert rows(fast.frames) == sorted(
        (frame_row(h, g, hs) for h, g, hs in frames),
        key=lambda r: (r["first_ts"], r["machine"], r["zone"]),
    )
    assert [(d.offset, d.error, d.detail) for d in fast.dead] == [
        (d.offset, d.error, d.detail) for d in checked.dead
    ]
    assert fast.counts == checked.counts


# --- read_frames / read_approvals on generated records --------------------------------------


def generated(seed: int, count: int, bad: float) -> tuple[list[tuple[Raw, Raw, int]], ...]:
    """Requests and approvals of a :class:`GameFrames` run as ``(key, value, timestamp)``."""
    frames = GameFrames(
        random.Random(seed),
        make_schedule("steady", rate=1000, count=count),
        start_ms=START,
        request_topic="RQ",
        approval_topic="RS",
        bad_fraction=bad,
    )
    out = list(frames.records())
    requests: list[tuple[Raw, Raw, int]] = [(k, v, t) for topic, k, v, t, _ in out if topic == "RQ"]
    approvals: list[tuple[Raw, Raw, int]] = [
        (k, v, t) for topic, k, v, t, _ in out if topic == "RS"
    ]
    return requests, approvals


@pytest.fixture(scope="module")
def spoiled() -> tuple[list[tuple[Raw, Raw, int]], ...]:
    return generated(17, 3000, bad=0.3)


def reference(
    records: Sequence[tuple[Raw, Raw, int]],
) -> tuple[list[dict[str, int]], Counter[tuple[int, str]]]:
    """Usable frames and dead letters ``(offset, error)``, one record at a time."""
    usable: list[dict[str, int]] = []
    dead: Counter[tuple[int, str]] = Counter()
    for offset, (raw_key, value, _) in enumerate(records):
        try:
            header = fb.check_header(_bytes(raw_key))
            frame = fb.check_body(_bytes(value))
        except dl.Refused as exc:
            dead[offset, exc.error] += 1
            continue
        row = frame_row(header, frame.game, frame.hits)
        if row["n_bad"]:
            dead[offset, dl.UNDECODABLE_HIT] += 1
        usable.append(row)
    return sorted(usable, key=lambda r: (r["first_ts"], r["machine"], r["zone"])), dead


def test_generated_frames_are_used_or_dead_lettered_as_row_by_row(
    spoiled: tuple[list[tuple[Raw, Raw, int]], ...],
) -> None:
    """Every generated frame is in ``frames`` or dead-lettered (a frame with undecodable
    hits both), with the rows, errors and counts of the row-by-row reference; reading the
    batch in slices gives the same."""
    requests, _ = spoiled
    batch = kafka_batch(requests)
    out, sliced = fb.Frames(), fb.Frames()
    fb.read_frames(batch, out)
    for start in range(0, batch.num_rows, 700):
        fb.read_frames(batch.slice(start, 700), sliced)
    usable, dead = reference(requests)
    assert rows(out.frames) == usable == rows(sliced.frames)
    assert Counter((d.offset, d.error) for d in out.dead) == dead
    assert sorted((d.offset, d.error, d.detail) for d in out.dead) == sorted(
        (d.offset, d.error, d.detail) for d in sliced.dead
    )
    kept = {(r["first_ts"], r["machine"]) for r in usable}
    thrown = {o for (o, e) in dead if e != dl.UNDECODABLE_HIT}
    assert len(kept) + len(thrown) == len(requests)
    errors = Counter(e for (_, e) in dead)
    assert set(errors) == {
        dl.NOT_JSON,
        dl.NULL_KEY,
        dl.MISSING_FIELD,
        dl.WRONG_TYPE,
        dl.UNDECODABLE_HIT,
    }
    assert out.counts["frames.records"] == len(requests)
    assert out.counts["frames_dlq.records"] == len(thrown)
    for error, n in errors.items():
        if error != dl.UNDECODABLE_HIT:
            assert out.counts[f"frames_dlq.{error}"] == n
    assert out.counts["hits_dlq.frames"] == errors[dl.UNDECODABLE_HIT]
    assert out.counts["hits_dlq.hits"] == sum(r["n_bad"] for r in usable) > 0
    assert out.counts == sliced.counts


def test_generated_approvals_in_window_pair_with_their_frames(
    spoiled: tuple[list[tuple[Raw, Raw, int]], ...],
) -> None:
    """Approvals stamped within the window pair with their (usable) frames: the approved
    headers are those of the independent reference of :mod:`streamscale.experiment.verify`."""
    requests, approvals = spoiled
    window = 1000  # the generator delays approvals by 0-2000 ms: about half are late
    out = fb.Frames()
    fb.read_frames(kafka_batch(requests), out)
    fb.read_approvals(kafka_batch(approvals, "RS"), out, window)
    usable_keys = []
    for raw_key, _, stamp in approvals:
        try:
            header = fb.check_header(_bytes(raw_key))
        except dl.Refused:
            continue
        usable_keys.append((header, header.ts <= stamp <= header.ts + window))
    in_window = [h for h, ok in usable_keys if ok]
    assert out.counts["approvals.records"] == len(approvals)
    assert out.counts["approvals_dlq.records"] == len(approvals) - len(usable_keys) > 0
    assert out.counts["join.late_approvals"] == len(usable_keys) - len(in_window) > 0
    assert [(r["first_ts"], r["machine"]) for r in rows(out.approvals)] == sorted(
        (h.ts, int(h.machine)) for h in in_window
    )

    paired = fb.pair(out.frames + out.approvals)
    as_bytes = [(_bytes(k), _bytes(v), t) for k, v, t in requests]
    expected = verify.approved_frames(
        as_bytes, [(_bytes(k), _bytes(v), t) for k, v, t in approvals], window
    )
    approved = rows([paired.approved])
    assert [(r["first_ts"], fb.machine_text(r["machine"])) for r in approved] == sorted(
        (h.ts, h.machine) for h, _ in expected
    )
    assert paired.counts["join.approved"] == len(expected)
    assert paired.counts["join.duplicate_approvals"] == 0
    assert paired.counts["join.hits"] == sum(r["n_hits"] for r in approved)
    assert paired.counts["join.hits_undecodable"] == sum(r["n_bad"] for r in approved) > 0
    frames_in = sum(r["frames"] for r in rows(out.frames))
    assert frames_in == len(approved) + sum(r["frames"] for r in rows([paired.unpaired]))


@pytest.mark.parametrize(
    ("stamp", "in_time"),
    [
        (-1, False),
        (0, True),
        (WINDOW_MS, True),
        (WINDOW_MS + 1, False),
    ],
)
def test_approval_window_is_inclusive(stamp: int, in_time: bool) -> None:
    """An approval counts when its Kafka timestamp is within [ts, ts + window]."""
    out = fb.Frames()
    fb.read_approvals(kafka_batch([(key(START), body(HIT), START + stamp)], "RS"), out, WINDOW_MS)
    assert len(rows(out.approvals)) == int(in_time)
    assert out.counts["join.late_approvals"] == int(not in_time)


def test_approval_key_errors_are_dead_lettered_under_approvals() -> None:
    out = fb.Frames()
    records = [("nope", None, 1), (None, None, 1), (key(1), body(HIT), 1)]
    fb.read_approvals(kafka_batch(records, "RS", 2), out, WINDOW_MS)
    assert [(d.topic, d.partition, d.offset, d.error) for d in out.dead] == [
        ("RS", 2, 0, dl.NOT_JSON),
        ("RS", 2, 1, dl.NULL_KEY),
    ]
    assert out.counts["approvals_dlq.records"] == 2
    assert out.counts["approvals_dlq.not_json"] == out.counts["approvals_dlq.null_key"] == 1
    assert out.counts["frames_dlq.records"] == 0
    [row] = rows(out.approvals)  # an approval's value is not decoded
    assert (row["first_ts"], row["approvals"], row["frames"], row["game"]) == (1, 1, 0, 0)


# --- pair and spans ------------------------------------------------------------------------


def test_pair_approves_headers_with_a_frame_and_an_approval() -> None:
    """A: frame and two approvals (one duplicate); B: frame only; C: approval only."""
    out = fb.Frames()
    a, b, c = key(100), key(200, "000002"), key(300, zone="US")
    fb.read_frames(kafka_batch([(a, body(HIT, "FF114101"), 100), (b, body(HIT), 200)]), out)
    fb.read_approvals(
        kafka_batch([(a, body(HIT), 100), (c, body(HIT), 300), (a, body(HIT), 101)]), out, 10
    )
    paired = fb.pair(out.frames + out.approvals)
    [approved] = rows([paired.approved])
    assert (approved["first_ts"], approved["frames"], approved["approvals"]) == (100, 1, 2)
    assert approved["game"] == codec.GAME_CODES["NeonBrawl"]
    assert (approved["n_hits"], approved["n_bad"], approved["impact_sum"]) == (1, 1, 100)
    assert paired.counts == {
        "join.approved": 1,
        "join.duplicate_approvals": 1,
        "join.hits": 1,
        "join.hits_undecodable": 1,
    }
    unpaired = rows([paired.unpaired])
    assert [(r["first_ts"], r["machine"], r["zone"]) for r in unpaired] == [
        (200, 2, ZONES.index("EU")),
        (300, 123456, ZONES.index("US")),
    ]
    assert [(r["frames"], r["approvals"], r["game"]) for r in unpaired] == [
        (1, 0, codec.GAME_CODES["NeonBrawl"]),
        (0, 1, 0),
    ]


header_rows = st.lists(
    st.fixed_dictionaries(
        {
            "machine": st.integers(1, 4),
            "zone": st.integers(0, 1),
            "first_ts": st.integers(0, 30),
            "frames": st.integers(0, 2),
            "approvals": st.integers(0, 2),
            "n_hits": st.integers(0, 5),
            "impact_sum": st.integers(0, 1000),
            "impact_max": st.integers(0, 209),
            "game": st.integers(1, len(GAMES)),
        }
    ),
    max_size=40,
)


@settings(max_examples=60)
@given(header_rows, st.integers(1, 5))
def test_pair_sums_per_header_and_splits_by_pairing(data: list[dict[str, int]], parts: int) -> None:
    """Rows of one header, in any tables, are summed; approved = frames and approvals."""
    for r in data:
        r["last_ts"] = r["first_ts"]
    tables = [span_table(data[i::parts]) for i in range(parts)]
    paired = fb.pair(tables)
    sums: dict[tuple[int, int, int], Counter[str]] = {}
    for r in data:
        sums.setdefault((r["first_ts"], r["machine"], r["zone"]), Counter()).update(
            {n: r[n] for n in ("frames", "approvals", "n_hits", "impact_sum")}
        )
    approved = {(r["first_ts"], r["machine"], r["zone"]): r for r in rows([paired.approved])}
    unpaired = {(r["first_ts"], r["machine"], r["zone"]): r for r in rows([paired.unpaired])}
    assert paired.approved.num_rows == len(approved) and paired.unpaired.num_rows == len(unpaired)
    assert set(approved) | set(unpaired) == set(sums)
    assert not set(approved) & set(unpaired)
    for header, total in sums.items():
        row = approved.get(header) or unpaired[header]
        assert {n: row[n] for n in total} == {n: total[n] for n in total}
        assert (header in approved) == (total["frames"] > 0 and total["approvals"] > 0)
        assert row["last_ts"] == row["first_ts"] == header[0]
    assert paired.counts["join.approved"] == sum(r["frames"] for r in approved.values())
    assert paired.counts["join.duplicate_approvals"] == sum(
        r["approvals"] - 1 for r in approved.values()
    )


@settings(max_examples=60)
@given(header_rows, st.integers(1, 12))
def test_spans_sum_per_machine_and_gap_bucket(data: list[dict[str, int]], gap: int) -> None:
    """Spans group by (machine, ts // gap), keep every sum, span less than a gap, and take
    zone and game from the latest frame."""
    seen = set()
    unique = []
    for r in data:  # headers are unique per (ts, machine): a machine never repeats a ts
        if (r["first_ts"], r["machine"]) not in seen:
            seen.add((r["first_ts"], r["machine"]))
            unique.append({**r, "last_ts": r["first_ts"]})
    approved = fb.pair([span_table(unique)]).approved
    out = fb.spans(approved, gap)
    assert out.schema == fb.SPAN_SCHEMA
    spans = out.to_pylist()
    headers = approved.to_pylist()
    groups: dict[tuple[int, int], list[dict[str, int]]] = {}
    for h in headers:
        groups.setdefault((h["machine"], h["first_ts"] // gap), []).append(h)
    assert sorted((s["machine"], s["first_ts"] // gap) for s in spans) == sorted(groups)
    for s in spans:
        members = groups[s["machine"], s["first_ts"] // gap]
        latest = max(members, key=lambda h: h["last_ts"])
        assert s["last_ts"] == latest["last_ts"]
        assert s["first_ts"] == min(h["first_ts"] for h in members)
        assert 0 <= s["last_ts"] - s["first_ts"] < gap
        assert (s["zone"], s["game"]) == (latest["zone"], latest["game"])
        assert s["impact_max"] == max(h["impact_max"] for h in members)
        for name in fb.SUMMED:
            assert s[name] == sum(h[name] for h in members)
    for name in fb.SUMMED:
        assert sum(s[name] for s in spans) == sum(h[name] for h in headers)


def test_spans_of_nothing() -> None:
    assert fb.spans(fb.SPAN_SCHEMA.empty_table(), 30_000).num_rows == 0
    paired = fb.pair([])
    assert paired.approved.num_rows == paired.unpaired.num_rows == 0
    assert set(paired.counts.values()) == {0}


def test_spans_of_generated_frames_keep_the_totals() -> None:
    requests, approvals = generated(3, 4000, bad=0.0)
    out = fb.Frames()
    fb.read_frames(kafka_batch(requests), out)
    fb.read_approvals(kafka_batch(approvals, "RS"), out, WINDOW_MS)
    approved = fb.pair(out.frames + out.approvals).approved
    spans = fb.spans(approved, 1000)
    assert spans.num_rows < approved.num_rows
    for name in (*fb.SUMMED, "impact_max"):
        column = np.asarray(spans.column(name))
        reduce = np.max if name == "impact_max" else np.sum
        assert reduce(column) == reduce(np.asarray(approved.column(name)))
    assert (np.asarray(spans.column("last_ts")) - np.asarray(spans.column("first_ts"))).max() < 1000


# --- dead letters as sink rows (deadletter.dead_letter_batch, fed by read_frames) -------------


def test_dead_letter_batch_rows_and_headers() -> None:
    letters = [
        dl.DeadLetter(b"k", b"v", "RQ", 3, 42, dl.NOT_JSON, "frame key is not a JSON object"),
        dl.DeadLetter(None, None, "RS", 0, 7, dl.NULL_KEY, "frame key is null"),
    ]
    batch = dl.dead_letter_batch(letters, "game-sessions-dlq")
    assert batch.schema.names == ["key", "value", "topic", "headers"]
    got: list[dict[str, Any]] = batch.to_pylist()
    assert [(r["key"], r["value"], r["topic"]) for r in got] == [
        (b"k", b"v", "game-sessions-dlq"),
        (None, None, "game-sessions-dlq"),
    ]
    assert [(h["key"], h["value"]) for h in got[0]["headers"]] == [
        (dl.HEADER_ERROR, b"not_json"),
        (dl.HEADER_DETAIL, b"frame key is not a JSON object"),
        (dl.HEADER_TOPIC, b"RQ"),
        (dl.HEADER_PARTITION, b"3"),
        (dl.HEADER_OFFSET, b"42"),
    ]
    assert {h["key"]: h["value"] for h in got[1]["headers"]}[dl.HEADER_OFFSET] == b"7"
    assert dl.dead_letter_batch([], "x").num_rows == 0


def test_dead_letters_of_read_frames_as_sink_rows() -> None:
    """What read_frames dead-letters becomes sink rows with the original bytes and source."""
    out = fb.Frames()
    records: list[tuple[Raw, Raw, int]] = [(key(1), body(HIT), 1), (None, b"{}", 2)]
    fb.read_frames(kafka_batch(records, "GAME-FRAME-RQ", 4), out)
    [row] = dl.dead_letter_batch(out.dead, "game-sessions-dlq").to_pylist()
    assert (row["key"], row["value"], row["topic"]) == (None, b"{}", "game-sessions-dlq")
    assert {h["key"]: h["value"] for h in row["headers"]} == {
        dl.HEADER_ERROR: b"null_key",
        dl.HEADER_DETAIL: b"frame key is null",
        dl.HEADER_TOPIC: b"GAME-FRAME-RQ",
        dl.HEADER_PARTITION: b"4",
        dl.HEADER_OFFSET: b"1",
    }
