"""Closing game sessions: what the session-window state hands over when a window closes,
turned into the pipeline's sessions and counts.

The state of game sessions lives in Spark's state store (:mod:`.game_sessions`): every row a
task could not settle on its own (the spans of frames it approved, the headers it could not
pair) is kept per machine in a session window, each row opening the window
``[first_ts, last_ts + gap)``. Windows that overlap merge, so one closed window holds
every row of a machine that could belong to the same session: the headers of one frame (same
machine, same ``ts``) always meet in one window. :func:`close` then, once a window has
closed (the watermark reached its end):

1. **pairs** its headers: a header with a frame and an in-window approval is approved; a
   header with a frame only is *unapproved*, one with approvals only holds *late* approvals;
2. merges the approved frames with the spans into the machine's true **sessions** (the
   window may be wider: an unapproved frame can bridge two sessions there, never here): a
   frame joins a session when it is less than ``gap`` after the session's last frame or
   before its first, and sessions that meet merge. Every one of them is closed, since it
   ends no later than the window.

Pure: pyarrow only, no Spark, no Kafka, no I/O.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from streamscale.pipelines import frame_batches as fb
from streamscale.pipelines import hits as codec


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


@dataclass
class Closed:
    """The sessions of closed windows and what closing them counted."""

    sessions: list[Session]
    counts: dict[str, int]


def close(spans: pa.Table, headers: pa.Table, gap_ms: int) -> Closed:
    """The sessions and counts of closed session windows (rows of
    :data:`.frame_batches.SPAN_SCHEMA`): ``spans`` are approved frames summed by the tasks,
    ``headers`` the headers they left unpaired (see the module doc)."""
    paired = fb.pair([headers])
    counts = dict(paired.counts)
    unpaired = paired.unpaired
    counts["join.unapproved"] = int(pc.sum(unpaired.column("frames")).as_py() or 0)
    counts["join.late_approvals"] = int(pc.sum(unpaired.column("approvals")).as_py() or 0)
    by_machine: dict[str, list[Session]] = {}
    for s in [*sessions_of(spans), *sessions_of(fb.spans(paired.approved, gap_ms))]:
        by_machine.setdefault(s.machine, []).append(s)
    closed = [s for m in sorted(by_machine) for s in merge_sessions(by_machine[m], gap_ms)]
    counts["sessions.closed"] = len(closed)
    return Closed(closed, counts)
