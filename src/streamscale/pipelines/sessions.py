"""The driver's half of game sessions: pairing across tasks and batches, the watermark, and
session windows per machine, with the state as bytes for the checkpoint.

Each micro-batch, the tasks (:mod:`.frame_batches`) hand over the spans of the frames they
approved, the headers they could not pair and the newest header ``ts`` of each input.
:func:`advance` then, on the driver:

1. moves the **watermark** to ``min over inputs (newest ts) - delay`` (an input that has never
   had a usable record does not hold it back, as in Spark);
2. **pairs** the unpaired headers of every task with those still pending from earlier
   batches; a header the watermark has passed without being paired is settled: its frames
   are *unapproved*, its approvals *late* (both counted, never emitted);
3. merges the approved spans into each machine's **sessions**: a frame joins a session when
   it is less than ``gap`` after the session's last frame or before its first (Spark's
   ``session_window``), and sessions that meet merge;
4. **closes** the sessions whose end (last frame + gap) the watermark has reached: they are
   returned once, never updated (Spark's append mode).

What survives the batch (pending headers, open sessions, newest ts per input) is a
:class:`State`, saved in the checkpoint after every batch (:meth:`State.to_bytes`). Pure:
pyarrow only, no Spark, no Kafka, no I/O.
"""

from __future__ import annotations

import io
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Final

import pyarrow as pa
import pyarrow.compute as pc

from streamscale.pipelines import frame_batches as fb
from streamscale.pipelines import hits as codec

STATE_VERSION: Final = 1
_META_KEY: Final = b"streamscale.sessions"


@dataclass(frozen=True)
class Session:
    """One machine's session: its frames' time range and sums (counters as in
    :data:`.frame_batches.SUMMED`)."""

    machine: str
    zone: str
    game: str
    first_ts: int
    last_ts: int
    counters: tuple[int, ...]
    impact_max: int

    def merge(self, other: Session) -> Session:
        latest = other if other.last_ts >= self.last_ts else self
        return Session(
            self.machine,
            latest.zone,
            latest.game,
            min(self.first_ts, other.first_ts),
            max(self.last_ts, other.last_ts),
            tuple(a + b for a, b in zip(self.counters, other.counters, strict=True)),
            max(self.impact_max, other.impact_max),
        )

    def value(self, gap_ms: int) -> dict[str, Any]:
        """The session's JSON document (``maxImpact`` left out when it has no decodable hit,
        as Spark's ``to_json`` leaves out a null)."""
        c = dict(zip(fb.SUMMED, self.counters, strict=True))
        out: dict[str, Any] = {
            "machine": self.machine,
            "zone": self.zone,
            "game": self.game,
            "start": self.first_ts,
            "end": self.last_ts + gap_ms,
            "firstTs": self.first_ts,
            "lastTs": self.last_ts,
            "frames": c["frames"],
            "hits": c["n_hits"],
            "totalImpact": c["impact_sum"],
        }
        if self.impact_max > 0:
            out["maxImpact"] = self.impact_max
        out["impactTypes"] = {t: c[f"type_{t}"] for t in codec.IMPACT_TYPE_CODES}
        out["directions"] = {d: c[f"dir_{d}"] for d in codec.DIRECTION_CODES}
        return out

    def record(self, gap_ms: int) -> tuple[bytes, bytes]:
        """``(key, value)`` for the output topic: keyed by machine, compact JSON."""
        text = json.dumps(self.value(gap_ms), separators=(",", ":"))
        return self.machine.encode(), text.encode()


def sessions_of(spans: pa.Table) -> list[Session]:
    """Spans (rows of :data:`.frame_batches.SPAN_SCHEMA`) as sessions."""
    columns = {name: spans.column(name).to_pylist() for name in spans.column_names}
    return [
        Session(
            fb.machine_text(columns["machine"][i]),
            codec.ZONES[columns["zone"][i]],
            fb.GAME_NAMES.get(columns["game"][i], ""),
            columns["first_ts"][i],
            columns["last_ts"][i],
            tuple(columns[name][i] for name in fb.SUMMED),
            columns["impact_max"][i],
        )
        for i in range(spans.num_rows)
    ]


def merge_sessions(sessions: Iterable[Session], gap_ms: int) -> list[Session]:
    """Merge sessions less than a gap apart (one machine's), sorted by start."""
    merged: list[Session] = []
    for s in sorted(sessions, key=lambda s: (s.first_ts, s.last_ts)):
        if merged and s.first_ts < merged[-1].last_ts + gap_ms:
            merged[-1] = merged[-1].merge(s)
        else:
            merged.append(s)
    return merged


@dataclass(frozen=True)
class State:
    """What the pipeline carries from one micro-batch to the next."""

    pending: pa.Table = field(default_factory=fb.SPAN_SCHEMA.empty_table)
    open: tuple[Session, ...] = ()
    max_ts: Mapping[str, int] = field(default_factory=dict)

    def watermark(self, delay_ms: int) -> int | None:
        """Event time before which records are late: min over inputs of newest ts - delay."""
        return min(self.max_ts.values()) - delay_ms if self.max_ts else None

    def to_bytes(self) -> bytes:
        """Arrow IPC: the pending headers, with sessions and newest ts as schema metadata."""
        meta = {
            "version": STATE_VERSION,
            "max_ts": dict(self.max_ts),
            "open": [
                [s.machine, s.zone, s.game, s.first_ts, s.last_ts, list(s.counters), s.impact_max]
                for s in self.open
            ],
        }
        table = self.pending.replace_schema_metadata({_META_KEY: json.dumps(meta).encode()})
        sink = io.BytesIO()
        with pa.ipc.new_stream(sink, table.schema) as writer:
            writer.write_table(table)
        return sink.getvalue()

    @classmethod
    def from_bytes(cls, data: bytes) -> State:
        table = pa.ipc.open_stream(data).read_all()
        meta = json.loads((table.schema.metadata or {})[_META_KEY])
        if meta.get("version") != STATE_VERSION:
            raise ValueError(f"game-sessions state version {meta.get('version')} is not mine")
        sessions = tuple(
            Session(m, z, g, f, last, tuple(c), mx) for m, z, g, f, last, c, mx in meta["open"]
        )
        return cls(table.replace_schema_metadata(None), sessions, meta["max_ts"])


@dataclass
class Advanced:
    """One batch's result: the next state, the sessions closed now, and counts."""

    state: State
    closed: list[Session]
    counts: dict[str, int]
    watermark: int | None


def advance(
    state: State,
    spans: Sequence[pa.Table],
    unpaired: Sequence[pa.Table],
    max_ts: Mapping[str, int],
    *,
    gap_ms: int,
    delay_ms: int,
) -> Advanced:
    """Apply one micro-batch's task output to ``state`` (see the module doc)."""
    newest = dict(state.max_ts)
    for name, ts in max_ts.items():
        newest[name] = max(newest.get(name, ts), ts)
    after = replace(state, max_ts=newest)
    watermark = after.watermark(delay_ms)

    paired = fb.pair([state.pending, *unpaired])
    counts = dict(paired.counts)
    headers = paired.unpaired
    if watermark is not None and headers.num_rows:
        settled = pc.less(headers.column("first_ts"), pa.scalar(watermark, pa.int64()))
        done = headers.filter(settled)
        counts["join.unapproved"] = int(pc.sum(done.column("frames")).as_py() or 0)
        counts["join.late_approvals"] = int(pc.sum(done.column("approvals")).as_py() or 0)
        headers = headers.filter(pc.invert(settled))

    by_machine: dict[str, list[Session]] = {}
    for s in [*state.open, *sessions_of(fb.spans(paired.approved, gap_ms))]:
        by_machine.setdefault(s.machine, []).append(s)
    for table in spans:
        for s in sessions_of(table):
            by_machine.setdefault(s.machine, []).append(s)
    still_open: list[Session] = []
    closed: list[Session] = []
    for machine in sorted(by_machine):
        for s in merge_sessions(by_machine[machine], gap_ms):
            if watermark is not None and s.last_ts + gap_ms <= watermark:
                closed.append(s)
            else:
                still_open.append(s)
    counts["now.pending_frames"] = int(pc.sum(headers.column("frames")).as_py() or 0)
    counts["now.pending_approvals"] = int(pc.sum(headers.column("approvals")).as_py() or 0)
    counts["sessions.closed"] = len(closed)
    counts["now.open_sessions"] = len(still_open)
    return Advanced(State(headers, tuple(still_open), newest), closed, counts, watermark)
