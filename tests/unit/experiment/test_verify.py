"""The output checks' reference: sessions from frames, enrichment by key."""

from __future__ import annotations

import contextlib
import json
from collections import defaultdict
from collections.abc import Iterator

from hypothesis import given
from hypothesis import strategies as st

from streamscale.experiment.verify import (
    KafkaRecord,
    SessionFigures,
    SessionKey,
    actual_sessions,
    approved_frames,
    approved_keys,
    compare_enrichment,
    compare_sessions,
    expected_sessions,
    iter_approved_frames,
)
from streamscale.pipelines import hits as codec

HIT = codec.encode_hit(codec.Hit(100, "X", "UP", "Direct", "Pro", "NeonBrawl"))


def frame(ts: int, machine: str = "123456", hits: int = 1) -> tuple[bytes, bytes, int]:
    key = codec.header_json(codec.FrameHeader(ts, machine, "EU")).encode()
    value = codec.body_json(codec.FrameBody("NeonBrawl", (HIT,) * hits)).encode()
    return key, value, ts


def test_sessions_split_on_gap_and_only_approved_frames_count() -> None:
    requests = [frame(0), frame(10_000, hits=2), frame(45_000), frame(50_000, "654321")]
    approvals = [
        (*frame(0)[:2], 1500),
        (*frame(10000)[:2], 12000),
        (*frame(45000)[:2], 49000),
    ]
    approvals.append((*frame(50000, "654321")[:2], 50000))
    frames = approved_frames(requests, approvals, window_ms=3000)
    assert [h.ts for h, _ in frames] == [0, 10_000, 50_000]  # 45 000 approved 4 s late
    sessions = expected_sessions(frames, gap_ms=30_000)
    assert sessions == {
        ("123456", 0, 40_000): SessionFigures(2, 3, 300),
        ("654321", 50_000, 80_000): SessionFigures(1, 1, 100),
    }
    assert expected_sessions(frames, 30_000, exclude_machines=["654321"]).keys() == {
        ("123456", 0, 40_000)
    }


def test_gap_boundary_is_exclusive_like_session_window() -> None:
    frames = approved_frames([frame(0), frame(30_000)], [frame(0), frame(30_000)], 3000)
    assert len(expected_sessions(frames, gap_ms=30_000)) == 2
    frames = approved_frames([frame(0), frame(29_999)], [frame(0), frame(29_999)], 3000)
    assert len(expected_sessions(frames, gap_ms=30_000)) == 1


def test_malformed_frames_are_not_expected_and_bad_hits_are_skipped() -> None:
    """A frame whose hits are all undecodable is still an approved frame of its session
    (as the pipeline counts it); only its hits are skipped."""
    bad = (b"not json", b"{}", 5)
    assert approved_frames([bad], [bad], 3000) == []
    mixed = (frame(7)[0], b'{"game":"NeonBrawl","hits":["ZZ","' + HIT.encode() + b'"]}', 7)
    only_bad = (frame(9)[0], b'{"game":"NeonBrawl","hits":["ZZ"]}', 9)
    frames = approved_frames([mixed, only_bad], [mixed, only_bad], 3000)
    assert expected_sessions(frames, 30_000) == {("123456", 7, 30_009): SessionFigures(2, 1, 100)}


def test_approved_keys_skip_tombstones_bad_keys_and_late_stamps() -> None:
    key, value, _ = frame(1000)
    late_then_in_time = [(key, value, 5000), (key, value, 2000)]
    assert approved_keys(late_then_in_time, 3000) == {key}
    early = [(key, value, 999)]  # before the frame's ts
    assert approved_keys(early, 3000) == set()
    assert approved_keys([(key, None, 1000), (b"not json", value, 1000)], 3000) == set()


def naive_sessions(
    requests: list[KafkaRecord], approvals: list[KafkaRecord], window_ms: int, gap_ms: int
) -> dict[SessionKey, SessionFigures]:
    """The reference as first written (every approval's stamps kept, frames held whole,
    sorted by ts, cut at the gap), for the streamed one to be checked against."""
    stamps: dict[bytes | None, list[int]] = defaultdict(list)
    for key, value, ts in approvals:
        if key is not None and value is not None:
            stamps[key].append(ts)
    by_machine: dict[str, list[tuple[int, codec.FrameBody]]] = defaultdict(list)
    for key, value, _ in requests:
        try:
            header, body = codec.parse_header(key), codec.parse_body(value)
        except codec.FrameDecodeError:
            continue
        if any(header.ts <= t <= header.ts + window_ms for t in stamps.get(key, ())):
            by_machine[header.machine].append((header.ts, body))
    out: dict[SessionKey, SessionFigures] = {}
    for machine, items in by_machine.items():
        items.sort(key=lambda item: item[0])
        cuts = [i for i in range(1, len(items)) if items[i][0] >= items[i - 1][0] + gap_ms]
        for lo, hi in zip([0, *cuts], [*cuts, len(items)], strict=True):
            part = items[lo:hi]
            impacts = []
            for _, body in part:
                for hit in body.hits:
                    with contextlib.suppress(codec.HitDecodeError):
                        impacts.append(codec.decode_hit(hit).impact)
            window = (machine, part[0][0], part[-1][0] + gap_ms)
            out[window] = SessionFigures(len(part), len(impacts), sum(impacts))
    return out


@given(
    st.lists(
        st.tuples(
            st.sampled_from(["111111", "222222"]),
            st.integers(0, 15).map(lambda s: s * 10_000),  # 10 s apart: gaps meet the bound
            st.integers(0, 3),  # hits
            st.booleans(),  # a spoiled hit
            st.lists(st.integers(-1, 8).map(lambda d: d * 500), max_size=2),  # stamp - ts
        ),
        max_size=40,
    )
)
def test_streamed_reference_is_the_naive_one(
    frames: list[tuple[str, int, int, bool, list[int]]],
) -> None:
    """Streamed once, each topic through a generator (as the demo reads Kafka), the
    reference gives exactly the sessions of the naive one that holds everything."""
    requests: list[KafkaRecord] = []
    approvals: list[KafkaRecord] = []
    for machine, ts, hits, spoiled, stamps in frames:
        key, value, _ = frame(ts, machine, hits)
        if spoiled:
            value = value.replace(b'"]}', b'","ZZ"]}')
        requests.append((key, value, ts))
        approvals += [(key, value, ts + d) for d in stamps]

    def once(records: list[KafkaRecord]) -> Iterator[KafkaRecord]:
        yield from records

    streamed = expected_sessions(
        iter_approved_frames(once(requests), approved_keys(once(approvals), 3000)), 30_000
    )
    assert streamed == naive_sessions(requests, approvals, 3000, 30_000)


def session_record(
    machine: str, start: int, end: int, frames: int, hits: int, impact: int
) -> tuple[None, bytes, int]:
    row = {
        "machine": machine,
        "start": start,
        "end": end,
        "frames": frames,
        "hits": hits,
        "totalImpact": impact,
    }
    return None, json.dumps(row).encode(), 0


def test_compare_sessions() -> None:
    expected = {("1", 0, 30): SessionFigures(1, 2, 3), ("1", 100, 130): SessionFigures(1, 1, 1)}
    same = actual_sessions(
        [session_record("1", 0, 30, 1, 2, 3), session_record("1", 0, 30, 1, 2, 3)]
    )
    result = compare_sessions(expected, same, only_closed_before=130)
    assert result.ok and result.checked == 1  # replayed duplicate with the same figures is fine
    result = compare_sessions(expected, same)
    assert not result.ok and result.missing == ["session ('1', 100, 130)"]
    wrong = actual_sessions(
        [session_record("1", 0, 30, 1, 2, 4), session_record("2", 0, 30, 1, 1, 1)]
    )
    result = compare_sessions(expected, wrong, only_closed_before=130)
    assert len(result.different) == 1 and result.unexpected == ["session ('2', 0, 30)"]
    assert "NOT verified" in result.summary()


def test_compare_enrichment() -> None:
    purchases = [(b"t1", b"", 0), (b"t2", b"", 0), (b"t3", b"", 0)]
    enriched = [
        (b"t1", json.dumps({"id": 1, "name": "A", "price": 1.0}).encode(), 0),
        (b"t2", json.dumps({"id": 9, "name": "REF INCONNUE", "price": 2.0}).encode(), 0),
    ]
    dlq = [(b"t3", b"bad", 0)]
    assert compare_enrichment(purchases, enriched, dlq, {1: {"A", "B"}}).ok
    missing = compare_enrichment(purchases, enriched, [], {1: {"A"}})
    assert missing.missing == ["purchase b't3'"]
    invented = compare_enrichment(
        purchases, [(b"t1", json.dumps({"id": 1, "name": "Z"}).encode(), 0)], dlq, {1: {"A"}}
    )
    assert invented.different and invented.missing == ["purchase b't2'"]
