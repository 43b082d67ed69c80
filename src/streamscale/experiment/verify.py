"""Output checks of the seed pipelines against a reference computed from their input (pure,
but for :func:`reconcile_topics`, which reads the topics through a ``KafkaAdmin``).

The demo reads a run's input and output topics back and asks: is every approved frame counted
in exactly the session it belongs to, is every purchase enriched (or dead-lettered)? The
reference here is plain Python over the records, independent of the Spark code it checks.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Container, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from streamscale.pipelines import hits as codec

KafkaRecord = tuple[bytes | None, bytes | None, int]
"""``(key, value, timestamp_ms)`` as read back from a topic."""

SessionKey = tuple[str, int, int]
"""``(machine, start_ms, end_ms)`` of one session window."""


@dataclass(frozen=True)
class SessionFigures:
    frames: int
    hits: int
    total_impact: int


@dataclass
class Verification:
    """The outcome of a check: ``ok`` only when nothing is missing, extra or different."""

    checked: int = 0
    missing: list[str] = field(default_factory=list)
    unexpected: list[str] = field(default_factory=list)
    different: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not (self.missing or self.unexpected or self.different)

    def summary(self) -> str:
        if self.ok:
            return f"verified: {self.checked} checked, all as expected"
        parts = [
            f"{len(self.missing)} missing",
            f"{len(self.unexpected)} unexpected",
            f"{len(self.different)} different",
        ]
        sample = (self.missing + self.unexpected + self.different)[:3]
        return f"NOT verified ({', '.join(parts)} of {self.checked}): {'; '.join(sample)}"


def approved_keys(approvals: Iterable[KafkaRecord], window_ms: int) -> set[bytes]:
    """The keys (frame headers) of ``approvals`` stamped within ``window_ms`` of the header's
    ``ts``: a frame is approved when its key is one of them (a request's key is its header,
    byte for byte, so a key that is no header approves no frame and is left out). A set of
    keys, not the approvals: one pass over the approval topic, whatever its size."""
    approved: set[bytes] = set()
    for key, value, ts in approvals:
        if key is None or value is None or key in approved:  # a tombstone is dead-lettered
            continue
        try:
            header = codec.parse_header(key)
        except codec.FrameDecodeError:
            continue
        if header.ts <= ts <= header.ts + window_ms:
            approved.add(key)
    return approved


def iter_approved_frames(
    requests: Iterable[KafkaRecord], approved: Container[bytes]
) -> Iterator[tuple[codec.FrameHeader, codec.FrameBody]]:
    """The frames of ``requests`` with a valid header and body whose key is ``approved``
    (:func:`approved_keys`), one at a time: the demo's reference streams a whole topic
    through :func:`expected_sessions` without holding it."""
    for key, value, _ in requests:
        if key is None or value is None or key not in approved:
            continue
        try:
            header = codec.parse_header(key)
            body = codec.parse_body(value)
        except codec.FrameDecodeError:
            continue
        yield header, body


def approved_frames(
    requests: Iterable[KafkaRecord], approvals: Iterable[KafkaRecord], window_ms: int
) -> list[tuple[codec.FrameHeader, codec.FrameBody]]:
    """Frames with a valid header and body and an approval (same header) stamped within
    ``window_ms``. Undecodable hits are kept here and skipped when sessions are computed:
    the pipeline dead-letters such a frame once and still counts its good hits."""
    return list(iter_approved_frames(requests, approved_keys(approvals, window_ms)))


def expected_sessions(
    frames: Iterable[tuple[codec.FrameHeader, codec.FrameBody]],
    gap_ms: int,
    exclude_machines: Iterable[str] = (),
) -> dict[SessionKey, SessionFigures]:
    """Spark's ``session_window`` per machine: a frame within ``gap_ms`` of the session's
    newest frame extends it; the window ends ``gap_ms`` after its last frame.

    Each frame is reduced to its ``(ts, hits, impact)`` as it is read (``frames`` may be a
    stream: :func:`iter_approved_frames`), so that what is held is three integers a frame."""
    excluded = set(exclude_machines)
    by_machine: dict[str, list[tuple[int, int, int]]] = defaultdict(list)
    impacts: dict[str, int | None] = {}  # a hit string recurs: decode each one once
    for header, body in frames:
        if header.machine not in excluded:
            by_machine[header.machine].append((header.ts, *_figures(body, impacts)))
    out: dict[SessionKey, SessionFigures] = {}
    for machine, items in by_machine.items():
        items.sort()  # by ts; the sums do not depend on the order within a ts
        session: list[tuple[int, int, int]] = []
        for item in items:
            if session and item[0] >= session[-1][0] + gap_ms:
                out[_key(machine, session, gap_ms)] = _sum(session)
                session = []
            session.append(item)
        if session:
            out[_key(machine, session, gap_ms)] = _sum(session)
    return out


def _key(machine: str, session: list[tuple[int, int, int]], gap_ms: int) -> SessionKey:
    return (machine, session[0][0], session[-1][0] + gap_ms)


def _sum(session: list[tuple[int, int, int]]) -> SessionFigures:
    """Every approved frame counts (as in the pipeline, even one whose hits are all
    undecodable: it still extends its session); so does each of its decodable hits."""
    return SessionFigures(
        len(session), sum(item[1] for item in session), sum(item[2] for item in session)
    )


def _figures(body: codec.FrameBody, impacts: dict[str, int | None]) -> tuple[int, int]:
    """The decodable hits of a frame and their total impact; ``impacts`` holds the impact of
    each hit string decoded so far (None: undecodable)."""
    hits = impact = 0
    for hit in body.hits:
        if hit not in impacts:
            impacts[hit] = _impact(hit)
        value = impacts[hit]
        if value is not None:
            hits += 1
            impact += value
    return hits, impact


def _impact(hit: str) -> int | None:
    try:
        return codec.decode_hit(hit).impact
    except codec.HitDecodeError:
        return None


def actual_sessions(records: Iterable[KafkaRecord]) -> dict[SessionKey, list[SessionFigures]]:
    """Sessions written by the pipeline (a list per window: a replay may repeat one)."""
    out: dict[SessionKey, list[SessionFigures]] = defaultdict(list)
    for _, value, _ in records:
        if value is None:
            continue
        row = json.loads(value)
        key = (str(row["machine"]), int(row["start"]), int(row["end"]))
        out[key].append(
            SessionFigures(int(row["frames"]), int(row["hits"]), int(row["totalImpact"]))
        )
    return out


def compare_sessions(
    expected: Mapping[SessionKey, SessionFigures],
    actual: Mapping[SessionKey, list[SessionFigures]],
    *,
    only_closed_before: int | None = None,
) -> Verification:
    """Every expected session written with the same figures, nothing else written.

    Sessions ending at or after ``only_closed_before`` (epoch ms) may still be open in the
    pipeline's state: they are not required. A session written twice with the same figures
    (an at-least-once replay) is accepted; twice with different figures is not.
    """
    result = Verification()
    for key, figures in sorted(expected.items()):
        if only_closed_before is not None and key[2] >= only_closed_before:
            continue
        result.checked += 1
        written = actual.get(key)
        if not written:
            result.missing.append(f"session {key}")
        elif any(w != figures for w in written):
            result.different.append(f"session {key}: expected {figures}, written {written}")
    for key in sorted(set(actual) - set(expected)):
        result.unexpected.append(f"session {key}")
    return result


def compare_enrichment(
    purchases: Iterable[KafkaRecord],
    enriched: Iterable[KafkaRecord],
    dead_letters: Iterable[KafkaRecord],
    known_names: Mapping[int, set[str]],
    unknown_name: str = "REF INCONNUE",
) -> Verification:
    """Every purchase is enriched or dead-lettered (by key), with a name its product had at
    some point, or the unknown marker; nothing else is written. (Which of a product's names
    applies depends on processing order, which the known-answer tests pin down instead.)"""
    result = Verification()
    wanted: dict[bytes | None, int] = defaultdict(int)
    for key, _, _ in purchases:
        wanted[key] += 1
    seen: dict[bytes | None, int] = defaultdict(int)
    for key, value, _ in enriched:
        seen[key] += 1
        if value is None:
            result.different.append(f"purchase {key!r}: null output")
            continue
        row = json.loads(value)
        names = known_names.get(int(row["id"]), set())
        if row["name"] != unknown_name and row["name"] not in names:
            result.different.append(f"purchase {key!r}: name {row['name']!r} never known")
    for key, _, _ in dead_letters:
        if key in wanted:  # the referential's dead letters share the topic
            seen[key] += 1
    for key, count in wanted.items():
        result.checked += count
        if seen.get(key, 0) < count:
            result.missing.append(f"purchase {key!r}")
    for key in set(seen) - set(wanted):
        result.unexpected.append(f"output {key!r}")
    return result


# --- fault reconciliation: input = output + dead letters, by key --------------------------


@dataclass(frozen=True)
class Reconciliation:
    """Records of an input topic against what a pipeline wrote for them, by key and count.

    ``lost`` counts input records with no output and no dead letter; ``duplicated`` the
    output and dead letters beyond one per input record (an at-least-once replay);
    ``unexpected`` output whose key no input record has.
    """

    records_in: int
    out: int
    dead_lettered: int
    duplicated: int
    lost: int
    unexpected: int = 0
    lost_keys: tuple[bytes | None, ...] = ()

    @property
    def ok(self) -> bool:
        return self.lost == 0 and self.unexpected == 0

    def as_dict(self) -> dict[str, int]:
        return {
            "records_in": self.records_in,
            "out": self.out,
            "dead_lettered": self.dead_lettered,
            "duplicated": self.duplicated,
            "lost": self.lost,
            "unexpected": self.unexpected,
        }


def reconcile(
    inputs: Iterable[bytes | None],
    outputs: Iterable[bytes | None],
    dead_letters: Iterable[bytes | None],
) -> Reconciliation:
    """Keys of the input records, of the output and of the dead letters (of that input
    only), each once per record: every input record must appear at least once."""
    wanted: dict[bytes | None, int] = defaultdict(int)
    for key in inputs:
        wanted[key] += 1
    got: dict[bytes | None, int] = defaultdict(int)
    out = dead = 0
    for key in outputs:
        got[key] += 1
        out += 1
    for key in dead_letters:
        got[key] += 1
        dead += 1
    lost_keys = [k for k, n in wanted.items() if got.get(k, 0) < n]
    return Reconciliation(
        records_in=sum(wanted.values()),
        out=out,
        dead_lettered=dead,
        duplicated=sum(max(0, got.get(k, 0) - n) for k, n in wanted.items()),
        lost=sum(max(0, n - got.get(k, 0)) for k, n in wanted.items()),
        unexpected=sum(n for k, n in got.items() if k not in wanted),
        lost_keys=tuple(lost_keys[:10]),
    )


def dead_letters_of(messages: Iterable[Any], source_topic: str) -> list[Any]:
    """The dead letters (librdkafka messages of a ``*-dlq`` topic) whose ``source.topic``
    header names ``source_topic`` (a pipeline's dead-letter topic serves all its inputs)."""
    out = []
    for msg in messages:
        headers = dict(msg.headers() or [])
        if headers.get("source.topic") == source_topic.encode():
            out.append(msg)
    return out


def reconcile_topics(
    admin: Any, input_topic: str, output_topic: str, dlq_topic: str, isolation: str | None = None
) -> Reconciliation:
    """:func:`reconcile` over the topics themselves, each read to its end offsets now
    (``admin`` a :class:`streamscale.kafka.admin.KafkaAdmin`; the one I/O of this module);
    ``isolation`` (``read_committed``) for outputs written in transactions."""
    inputs = admin.read_all(input_topic)
    outputs = admin.read_all(output_topic, isolation=isolation)
    dead = dead_letters_of(admin.read_all(dlq_topic, isolation=isolation), input_topic)
    return reconcile((m.key() for m in inputs), (m.key() for m in outputs), (m.key() for m in dead))
