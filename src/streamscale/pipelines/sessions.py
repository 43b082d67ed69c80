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

Vectorised, on Arrow and NumPy columns: at 10⁶ machines most sessions hold one frame, so
sessions close at about the frame rate, and one Python object and ``json.dumps`` per session
took half of the Python workers' time (``docs/sustainable.md``).

Pure: pyarrow and NumPy only, no Spark, no Kafka, no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from streamscale.pipelines import frame_batches as fb
from streamscale.pipelines import hits as codec


@dataclass(frozen=True)
class Session:
    """One machine's session, read from a row of sessions (:func:`sessions_of`): its frames'
    time range and sums (counters as in :data:`.frame_batches.SUMMED`)."""

    machine: str
    zone: str
    game: str
    first_ts: int
    last_ts: int
    counters: tuple[int, ...]
    impact_max: int


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


def merge(spans: pa.Table, gap_ms: int) -> pa.Table:
    """Spans of any machines merged into sessions (rows of :data:`.frame_batches.SPAN_SCHEMA`),
    sorted by machine and start. Per machine, sorted by ``(first_ts, last_ts)``, a span joins
    the session before it when it starts less than ``gap_ms`` after that session's last frame
    (Spark's session window); counters add up, ``impact_max`` is the largest, ``zone`` and
    ``game`` are those of the latest frame (of the last span sorted among those that end
    last)."""
    if not spans.num_rows:
        return fb.SPAN_SCHEMA.empty_table()
    machine = spans.column("machine").to_numpy()
    first = spans.column("first_ts").to_numpy()
    last = spans.column("last_ts").to_numpy()
    order = np.lexsort((last, first, machine))
    m, f, e = machine[order], first[order], last[order]
    new = np.r_[True, m[1:] != m[:-1]]  # a machine's first span; then a session's, below
    group = np.cumsum(new) - 1
    # The running latest frame within each machine: one running maximum over values shifted so
    # that every machine's lie above the one's before it.
    low = int(f.min())
    width = int(e.max()) - low + 1
    shift = group.astype(np.int64) * width
    latest = np.maximum.accumulate(e - low + shift) - shift + low
    new[1:] |= f[1:] >= latest[:-1] + gap_ms
    starts = np.flatnonzero(new)
    last_ts = np.maximum.reduceat(e, starts)
    session = np.cumsum(new) - 1
    at_latest = np.where(e == last_ts[session], np.arange(len(order)), -1)
    pick = order[np.maximum.reduceat(at_latest, starts)]
    columns = fb.reduce_groups(spans, order, starts, pick)
    columns["first_ts"] = f[starts]
    columns["last_ts"] = last_ts
    return pa.table(columns, schema=fb.SPAN_SCHEMA)


_ZONE_NAMES = pa.array(codec.ZONES, pa.string())
_GAME_NAMES = pa.array(
    [fb.GAME_NAMES.get(code, "") for code in range(max(fb.GAME_NAMES) + 1)], pa.string()
)


def records(sessions: pa.Table, gap_ms: int) -> tuple[pa.Array, pa.Array]:
    """Keys and values of ``sessions`` (rows of :data:`.frame_batches.SPAN_SCHEMA`) for the
    output topic: the machine id, and the session's compact JSON document as
    :mod:`.game_sessions` describes it (``maxImpact`` left out when no hit was decodable, as
    Spark's ``to_json`` leaves out a null), built column by column."""
    if not sessions.num_rows:
        return pa.array([], pa.binary()), pa.array([], pa.binary())

    def text(name: str) -> Any:
        return pc.cast(sessions.column(name), pa.string())

    machine = pc.utf8_lpad(text("machine"), codec.MACHINE_ID_DIGITS, "0")
    first_ts = text("first_ts")
    end = pc.cast(pc.add(sessions.column("last_ts"), gap_ms), pa.string())
    impact_max = sessions.column("impact_max")
    max_part = pc.if_else(
        pc.greater(impact_max, 0),
        pc.binary_join_element_wise('"maxImpact":', pc.cast(impact_max, pa.string()), ",", ""),
        "",
    )
    parts: list[Any] = [
        '{"machine":"',
        machine,
        '","zone":"',
        pc.take(_ZONE_NAMES, sessions.column("zone")),
        '","game":"',
        pc.take(_GAME_NAMES, sessions.column("game")),
        '","start":',
        first_ts,
        ',"end":',
        end,
        ',"firstTs":',
        first_ts,
        ',"lastTs":',
        text("last_ts"),
        ',"frames":',
        text("frames"),
        ',"hits":',
        text("n_hits"),
        ',"totalImpact":',
        text("impact_sum"),
        ",",
        max_part,
    ]
    for name, codes, prefix in (
        ("impactTypes", codec.IMPACT_TYPE_CODES, "type_"),
        ("directions", codec.DIRECTION_CODES, "dir_"),
    ):
        parts.append(f'"{name}":{{')
        for i, code in enumerate(codes):
            parts.extend([f'"{code}":' if i == 0 else f',"{code}":', text(prefix + code)])
        parts.append("}," if name == "impactTypes" else "}}")
    value = pc.binary_join_element_wise(*parts, "")
    return _array(pc.cast(machine, pa.binary())), _array(pc.cast(value, pa.binary()))


def _array(column: Any) -> pa.Array:
    """One array of a table's column (a chunked array)."""
    return column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column


@dataclass
class Closed:
    """The sessions of closed windows (rows of :data:`.frame_batches.SPAN_SCHEMA`, sorted by
    machine and start) and what closing them counted."""

    table: pa.Table
    counts: dict[str, int]

    @property
    def sessions(self) -> list[Session]:
        return sessions_of(self.table)


def close(spans: pa.Table, headers: pa.Table, gap_ms: int) -> Closed:
    """The sessions and counts of closed session windows (rows of
    :data:`.frame_batches.SPAN_SCHEMA`): ``spans`` are approved frames summed by the tasks,
    ``headers`` the headers they left unpaired (see the module doc)."""
    paired = fb.pair([headers])
    counts = dict(paired.counts)
    unpaired = paired.unpaired
    counts["join.unapproved"] = int(pc.sum(unpaired.column("frames")).as_py() or 0)
    counts["join.late_approvals"] = int(pc.sum(unpaired.column("approvals")).as_py() or 0)
    approved = fb.spans(paired.approved, gap_ms)
    table = merge(pa.concat_tables([spans, approved]), gap_ms)
    counts["sessions.closed"] = table.num_rows
    return Closed(table, counts)
