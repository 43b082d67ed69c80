"""Game frames and approvals as Arrow batches: parsed, checked, paired and summed per column.

This is the per-task half of the game-sessions pipeline (:mod:`.game_sessions` runs it on
Spark's executors through ``mapInArrow``; :mod:`.sessions` closes what Spark's state kept).
It works on whole Arrow columns with pyarrow's compute kernels and NumPy, never one Python call per
record, and imports neither pyspark nor confluent_kafka, so it is tested on its own.

- **Parsing.** A key or body in the exact compact form the producers write (the shapes of
  :mod:`.hits`) is recognised by one anchored regular expression over the whole column
  (RE2, in C++); its hits are decoded from a fixed-width NumPy view of the text with lookup
  tables generated from :data:`.hits.HIT_LAYOUT`. Anything else (other spacing or key
  order, bad JSON, wrong types, unknown codes) takes the row-by-row path of
  :func:`check_header` and :func:`check_body`, which accept any valid JSON and name the
  error of an invalid record; both paths give the same result for a valid record.
- **Dead letters.** A record that cannot be used becomes a :class:`DeadLetter` (original
  bytes, error code of :mod:`.deadletter`, detail, source position). A frame with
  undecodable hits is dead-lettered once and its decodable hits go on. An approval's body
  is not decoded (its key is the header that pairs), but a null one, a tombstone, is
  refused.
- **Pairing.** An approval carries its frame's header, so "approved within the window" is a
  check of the approval alone (its Kafka timestamp within ``[ts, ts + window]``); pairing is
  then a sum per header. :func:`pair` pairs what one task read; headers left unpaired go
  to Spark's state store, where they are paired when their session window closes.
- **Spans.** Approved frames are summed per machine and ``ts // gap`` (:func:`spans`): frames
  of one such bucket are less than a gap apart, so they always fall into one session, and
  the state store keeps a few spans per machine and batch instead of every frame.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from streamscale.pipelines import deadletter as dl
from streamscale.pipelines import hits as codec
from streamscale.pipelines.deadletter import DeadLetter, Refused

TYPE_COLUMNS: Final = tuple(f"type_{name}" for name in codec.IMPACT_TYPE_CODES)
DIRECTION_COLUMNS: Final = tuple(f"dir_{name}" for name in codec.DIRECTION_CODES)
SUMMED: Final = (
    "frames",
    "approvals",
    "n_hits",
    "n_bad",
    "impact_sum",
    *TYPE_COLUMNS,
    *DIRECTION_COLUMNS,
)
"""Per-header and per-span counters, added up when headers or spans meet."""

SPAN_SCHEMA: Final = pa.schema(
    [
        ("machine", pa.int64()),
        ("zone", pa.int64()),
        ("game", pa.int64()),
        ("first_ts", pa.int64()),
        ("last_ts", pa.int64()),
        *((name, pa.int64()) for name in SUMMED),
        ("impact_max", pa.int64()),
    ]
)
"""A header (``first_ts == last_ts == ts``) or a sum of approved frames of one machine.

``machine`` is the 6-digit id as a number, ``zone`` its index in :data:`.hits.ZONES`,
``game`` its code in :data:`.hits.GAME_CODES` (0 for a header that has only approvals); the
zone and game of a span are those of its latest frame; ``impact_max`` is 0 when there is no
decodable hit. Everything is an integer, so that grouping and sums are NumPy's."""


def machine_text(machine: int) -> str:
    return f"{machine:0{codec.MACHINE_ID_DIGITS}d}"


GAME_NAMES: Final = {code: name for name, code in codec.GAME_CODES.items()}

_SLOTS = codec.HITS_PER_FRAME_MAX
_STRIDE = codec.HIT_HEX_LENGTH + 3  # a hit and the '","' before the next one
_HITS_WIDTH = _SLOTS * _STRIDE - 3
_TS_DIGITS = 18  # any ts of up to 18 digits fits an int64

BODY_PATTERN: Final = (
    r'^\{"game":"(?P<game>'
    + "|".join(re.escape(g) for g in codec.GAMES)
    + r')","hits":\["(?P<hits>[0-9A-Fa-f]{8}(?:","[0-9A-Fa-f]{8}){0,'
    + str(_SLOTS - 1)
    + r'})"\]\}$'
)
"""A frame body exactly as :func:`.hits.body_json` writes it, with 1-5 hits of 8 hex digits."""


def _nibbles() -> Any:
    """Hex digit → value; anything else → 0 (only ever applied to checked hex digits)."""
    table = np.zeros(256, np.int16)
    for i, c in enumerate("0123456789ABCDEF"):
        table[ord(c)] = i
        table[ord(c.lower())] = i
    return table


_NIBBLE = _nibbles()


def _valid_codes(width: int, codes: Mapping[str, int] | None) -> Any:
    """Which values a field of ``width`` hex digits may take (the impact: its range)."""
    ok = np.zeros(16**width, bool)
    if codes is None:
        ok[codec.IMPACT_MIN : codec.IMPACT_MAX + 1] = True
    else:
        ok[list(codes.values())] = True
    return ok


_FIELDS = tuple(
    (name, start - 1, width, _valid_codes(width, codes))
    for name, start, width, codes in codec.HIT_LAYOUT
)


# --- the row-by-row path: any JSON, and the reason a record is refused ---------------------


def _json_object(raw: bytes | None, what: str, null_error: str) -> dict[str, Any]:
    if raw is None:
        raise Refused(null_error, f"{what} is null")
    try:
        parsed = json.loads(raw)
    except (ValueError, RecursionError):
        raise Refused(dl.NOT_JSON, f"{what} is not a JSON object") from None
    if not isinstance(parsed, dict):
        raise Refused(dl.NOT_JSON, f"{what} is not a JSON object")
    return parsed


_BIGINT: Final = range(-(2**63), 2**63)


def _fields(obj: dict[str, Any], what: str, types: Mapping[str, tuple[type, ...]]) -> None:
    """Wrong JSON types first (as Spark's ``from_json`` reads them: an integer beyond BIGINT
    is unreadable, and would not fit the int64 columns), then missing fields."""
    for name, allowed in types.items():
        value = obj.get(name)
        if value is not None and (
            isinstance(value, bool)
            or not isinstance(value, allowed)
            or (isinstance(value, int) and value not in _BIGINT)
        ):
            expected = ", ".join(f"{f} {codec_type(t)}" for f, t in types.items())
            raise Refused(dl.WRONG_TYPE, f"{what} has a field of the wrong type ({expected})")
    for name in types:
        if obj.get(name) is None:
            raise Refused(dl.MISSING_FIELD, f"{what} has no {name}")


def codec_type(allowed: tuple[type, ...]) -> str:
    return "an integer" if allowed == (int,) else "a string" if allowed == (str,) else "a list"


def check_header(raw: bytes | None) -> codec.FrameHeader:
    """A frame key in any JSON form, or :class:`Refused`."""
    obj = _json_object(raw, "frame key", dl.NULL_KEY)
    _fields(obj, "frame key", {"ts": (int,), "machine": (str,), "zone": (str,)})
    try:
        return codec.header_of(obj)  # the values' rules are the codec's
    except codec.FrameDecodeError:
        raise Refused(
            dl.INVALID_VALUE, "frame key: ts negative, machine not 6 digits or unknown zone"
        ) from None


def check_body(raw: bytes | None) -> codec.FrameBody:
    """A frame body in any JSON form, or :class:`Refused` (its hits are not decoded here:
    a hit that is not a string is an undecodable hit, not a bad body)."""
    obj = _json_object(raw, "frame body", dl.NULL_VALUE)
    _fields(obj, "frame body", {"game": (str,), "hits": (list,)})
    game, hits = obj["game"], obj["hits"]
    lo, hi = codec.HITS_PER_FRAME_MIN, codec.HITS_PER_FRAME_MAX
    if game not in codec.GAME_CODES or not lo <= len(hits) <= hi:
        raise Refused(dl.INVALID_VALUE, f"frame body: unknown game or not {lo}-{hi} hits")
    return codec.FrameBody(game, tuple(hits))


def hit_problems(hits: Sequence[object]) -> list[str]:
    """``hit I TEXT (reason)`` for each undecodable hit, in order (I counts from 0)."""
    problems = []
    for i, hit in enumerate(hits):
        try:
            codec.decode_hit(hit)
        except codec.HitDecodeError as exc:
            text = hit if isinstance(hit, str) else json.dumps(hit)
            problems.append(f"hit {i} {text} ({exc.reason})")
    return problems


# --- the vectorized path -------------------------------------------------------------------


def _binary_rows(column: pa.Array) -> tuple[Any, Any, Any]:
    """A binary column's data bytes, per-row start offsets and lengths (null rows: -1)."""
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    n = len(column)
    offsets = np.frombuffer(
        column.buffers()[1], np.int32, count=n + 1, offset=4 * column.offset
    ).astype(np.int64)
    data = column.buffers()[2]
    raw = np.frombuffer(data, np.uint8) if data is not None else np.zeros(0, np.uint8)
    lengths = np.diff(offsets)
    if column.null_count:
        lengths[~column.is_valid().to_numpy(zero_copy_only=False)] = -1
    return raw, offsets[:-1], lengths


def _key_layout(digits: int) -> tuple[bytes, Any, Any, Any, Any]:
    """A canonical key with a ``digits``-digit ts: its template and the positions of the
    fixed bytes, of the ts digits, of the machine digits and of the zone."""
    ts = "9" * digits
    text = f'{{"ts":{ts},"machine":"999999","zone":"ZZ"}}'.encode()
    ts_at = np.arange(6, 6 + digits)
    machine_at = np.arange(18 + digits, 24 + digits)
    zone_at = np.arange(34 + digits, 36 + digits)
    fixed = np.setdiff1d(np.arange(len(text)), np.concatenate([ts_at, machine_at, zone_at]))
    return text, fixed, ts_at, machine_at, zone_at


_KEY_LAYOUTS = {len(_key_layout(d)[0]): _key_layout(d) for d in range(1, _TS_DIGITS + 1)}
_ZONE_CODES = np.array([ord(z[0]) * 256 + ord(z[1]) for z in codec.ZONES])


def parse_keys(column: pa.Array) -> tuple[Any, Any, Any, Any]:
    """``ts, machine, zone`` (NumPy int64) of the keys in the exact form of
    :func:`.hits.header_json` (canonical digits), and the mask of those rows; the others are
    left to :func:`check_header`. Fixed-width byte comparisons, one length at a time."""
    raw, starts, lengths = _binary_rows(column)
    n = len(lengths)
    ts = np.zeros(n, np.int64)
    machine = np.zeros(n, np.int64)
    zone = np.zeros(n, np.int64)
    ok = np.zeros(n, bool)
    for length in np.unique(lengths).tolist():
        layout = _KEY_LAYOUTS.get(length)
        if layout is None:
            continue
        text, fixed, ts_at, machine_at, zone_at = layout
        rows = np.flatnonzero(lengths == length)
        b = raw[starts[rows, None] + np.arange(length)]
        template = np.frombuffer(text, np.uint8)
        good = (b[:, fixed] == template[fixed]).all(axis=1)
        digits = b[:, np.concatenate([ts_at, machine_at])].astype(np.int64) - 48
        good &= ((digits >= 0) & (digits <= 9)).all(axis=1)
        if len(ts_at) > 1:
            good &= b[:, ts_at[0]] != ord("0")
        z = b[:, zone_at[0]].astype(np.int64) * 256 + b[:, zone_at[1]]
        zi = np.full(len(rows), -1, np.int64)
        for i, code in enumerate(_ZONE_CODES):
            zi[z == code] = i
        good &= zi >= 0
        k = len(ts_at)
        ts[rows] = digits[:, :k] @ (10 ** np.arange(k - 1, -1, -1, dtype=np.int64))
        machine[rows] = digits[:, k:] @ (10 ** np.arange(5, -1, -1, dtype=np.int64))
        zone[rows] = zi
        ok[rows] = good
    return ts, machine, zone, ok


def decode_hit_texts(texts: pa.Array) -> dict[str, Any]:
    """Per-frame statistics of hit lists ``8HEX","8HEX...`` (the ``hits`` group of
    :data:`BODY_PATTERN`: hex digits only): count, impact sum and max, counts per impact type
    and direction of the decodable hits, and ``n_bad``, how many have an unknown code or an
    impact out of range. NumPy int64 columns."""
    n = len(texts)
    if isinstance(texts, pa.ChunkedArray):
        texts = texts.combine_chunks()
    lengths = pc.utf8_length(texts).to_numpy(zero_copy_only=False).astype(np.int64)
    present = np.arange(_SLOTS)[None, :] < ((lengths + 3) // _STRIDE)[:, None]
    padded = pc.utf8_rpad(texts, _HITS_WIDTH, " ")
    first = int(np.frombuffer(padded.buffers()[1], np.int32, count=1, offset=4 * padded.offset)[0])
    raw = np.frombuffer(padded.buffers()[2], np.uint8, count=n * _HITS_WIDTH, offset=first)
    nib = _NIBBLE[raw.reshape(n, _HITS_WIDTH)]
    base = np.arange(_SLOTS) * _STRIDE
    good = present.copy()
    values: dict[str, Any] = {}
    for name, start, width, ok in _FIELDS:
        value = nib[:, base + start]
        for d in range(1, width):
            value = value * 16 + nib[:, base + start + d]
        good &= ok[value]
        values[name] = value
    impacts = np.where(good, values["impact"], 0).astype(np.int64)
    n_good = good.sum(axis=1)
    columns = {
        "n_hits": n_good,
        "n_bad": present.sum(axis=1) - n_good,
        "impact_sum": impacts.sum(axis=1),
        "impact_max": impacts.max(axis=1),
    }
    row = np.broadcast_to(np.arange(n)[:, None] * 16, good.shape)
    for field_name, names, table in (
        ("impactType", TYPE_COLUMNS, codec.IMPACT_TYPE_CODES),
        ("direction", DIRECTION_COLUMNS, codec.DIRECTION_CODES),
    ):
        per_code = np.bincount((row + values[field_name])[good], minlength=16 * n).reshape(n, 16)
        for column, code in zip(names, table.values(), strict=True):
            columns[column] = per_code[:, code]
    return {k: np.asarray(v, np.int64) for k, v in columns.items()}


def _hit_stats(bodies: Sequence[codec.FrameBody]) -> dict[str, Any]:
    """:func:`decode_hit_texts` for bodies read by the checked path (hits of any type)."""
    texts = []
    not_hex = np.zeros(len(bodies), np.int64)
    for i, body in enumerate(bodies):
        fine = [h for h in body.hits if isinstance(h, str) and codec._HEX8.fullmatch(h)]
        not_hex[i] = len(body.hits) - len(fine)
        texts.append('","'.join(fine))
    stats = decode_hit_texts(pa.array(texts, pa.string()))
    stats["n_bad"] = stats["n_bad"] + not_hex
    return stats


ALWAYS_COUNTED: Final = (
    "frames.records",
    "approvals.records",
    "frames_dlq.records",
    "approvals_dlq.records",
    "hits_dlq.frames",
    "hits_dlq.hits",
    "join.late_approvals",
)
"""Counts reported even when zero (the others, per error code, only when they occur)."""


@dataclass
class Frames:
    """The usable frames and approvals of some batches, and what could not be used."""

    frames: list[pa.Table] = field(default_factory=list)
    approvals: list[pa.Table] = field(default_factory=list)
    dead: list[DeadLetter] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(ALWAYS_COUNTED, 0))

    def count(self, name: str, n: int = 1) -> None:
        if n:
            self.counts[name] = self.counts.get(name, 0) + int(n)

    def refuse(self, batch: pa.RecordBatch, i: int, what: str, error: str, detail: str) -> None:
        """Dead-letter row ``i`` of ``batch`` (``what``: "frames" or "approvals")."""
        out = DeadLetter(
            batch.column("key")[i].as_py(),
            batch.column("value")[i].as_py(),
            batch.column("topic")[i].as_py(),
            batch.column("partition")[i].as_py(),
            batch.column("offset")[i].as_py(),
            error,
            detail,
        )
        self.dead.append(out)
        if error == dl.UNDECODABLE_HIT:
            return
        self.count(f"{what}_dlq.records")
        self.count(f"{what}_dlq.{error}")


def _headers(batch: pa.RecordBatch, out: Frames, what: str) -> tuple[Any, Any, Any, Any]:
    """``ts, machine, zone`` of every row and the mask of the usable ones (a row whose key
    is unusable is dead-lettered here)."""
    keys = batch.column("key")
    ts, machine, zone, usable = parse_keys(keys)
    for i in np.flatnonzero(~usable).tolist():
        try:
            header = check_header(keys[i].as_py())
        except Refused as exc:
            out.refuse(batch, i, what, exc.error, exc.detail)
            continue
        usable[i] = True
        ts[i] = header.ts
        machine[i] = int(header.machine)
        zone[i] = codec.ZONES.index(header.zone)
    return ts, machine, zone, usable


def _table(columns: Mapping[str, Any], rows: Any) -> pa.Table:
    """A :data:`SPAN_SCHEMA` table of the ``rows`` mask of NumPy columns (0 when absent)."""
    m = int(rows.sum())
    return pa.table(
        {
            name: columns[name][rows] if name in columns else np.zeros(m, np.int64)
            for name in SPAN_SCHEMA.names
        },
        schema=SPAN_SCHEMA,
    )


def read_frames(batch: pa.RecordBatch, out: Frames) -> None:
    """Parse a batch of frame records (the source's columns) into ``out``."""
    n = batch.num_rows
    if not n:
        return
    out.count("frames.records", n)
    ts, machine, zone, usable = _headers(batch, out, "frames")
    values = batch.column("value")
    text = values.view(pa.string()) if pa.types.is_binary(values.type) else values
    matched = pc.extract_regex(text, BODY_PATTERN)
    fast = usable & matched.is_valid().to_numpy(zero_copy_only=False)
    stats = {name: np.zeros(n, np.int64) for name in (*SUMMED[2:], "impact_max")}
    game = np.zeros(n, np.int64)
    if fast.any():
        keep = pa.array(fast)
        decoded = decode_hit_texts(pc.struct_field(matched, "hits").filter(keep))
        for name, column in decoded.items():
            stats[name][fast] = column
        names = pc.struct_field(matched, "game").filter(keep)
        game[fast] = pc.index_in(names, value_set=pa.array(codec.GAMES)).to_numpy() + 1
    bodies: dict[int, codec.FrameBody] = {}
    for i in np.flatnonzero(usable & ~fast).tolist():
        try:
            bodies[i] = check_body(values[i].as_py())
        except Refused as exc:
            out.refuse(batch, i, "frames", exc.error, exc.detail)
            usable[i] = False
    if bodies:
        rows = list(bodies)
        for name, column in _hit_stats(list(bodies.values())).items():
            stats[name][rows] = column
        game[rows] = [codec.GAME_CODES[b.game] for b in bodies.values()]
    for i in np.flatnonzero(usable & (stats["n_bad"] > 0)).tolist():
        body = bodies.get(i) or check_body(values[i].as_py())
        detail = "undecodable hit(s): " + ", ".join(hit_problems(body.hits))
        out.refuse(batch, i, "frames", dl.UNDECODABLE_HIT, detail)
        out.count("hits_dlq.frames")
        out.count("hits_dlq.hits", int(stats["n_bad"][i]))
    frames = np.ones(n, np.int64)
    columns = {"machine": machine, "zone": zone, "game": game, "frames": frames, **stats}
    out.frames.append(_table({**columns, "first_ts": ts, "last_ts": ts}, usable))


def read_approvals(batch: pa.RecordBatch, out: Frames, window_ms: int) -> None:
    """Parse a batch of approval records into ``out``; an approval whose Kafka timestamp is
    outside ``[ts, ts + window_ms]`` is late as it arrives (counted, not paired)."""
    n = batch.num_rows
    if not n:
        return
    out.count("approvals.records", n)
    ts, machine, zone, usable = _headers(batch, out, "approvals")
    # An approval carries its frame's body; a null value is a tombstone, which no approval is.
    tombstones = usable & batch.column("value").is_null().to_numpy(zero_copy_only=False)
    for i in np.flatnonzero(tombstones).tolist():
        out.refuse(batch, i, "approvals", dl.NULL_VALUE, "approval value is null (a tombstone)")
    usable &= ~tombstones
    stamps = pc.cast(batch.column("timestamp"), pa.int64()).to_numpy(zero_copy_only=False)
    approved_at = stamps // 1000
    in_window = usable & (approved_at >= ts) & (approved_at <= ts + window_ms)
    out.count("join.late_approvals", int((usable & ~in_window).sum()))
    columns = {"machine": machine, "zone": zone, "first_ts": ts, "last_ts": ts}
    out.approvals.append(_table({**columns, "approvals": np.ones(n, np.int64)}, in_window))


# --- pairing and spans ---------------------------------------------------------------------


def _concat(tables: Sequence[pa.Table]) -> pa.Table:
    return pa.concat_tables([t for t in tables if t.num_rows] or [SPAN_SCHEMA.empty_table()])


def _starts(*sorted_keys: Any) -> Any:
    """Where each run of equal keys begins in sorted key arrays."""
    new = np.zeros(len(sorted_keys[0]), bool)
    new[:1] = True
    for key in sorted_keys:
        new[1:] |= key[1:] != key[:-1]
    return np.flatnonzero(new)


def reduce_groups(table: pa.Table, order: Any, starts: Any, pick: Any) -> dict[str, Any]:
    """``table``'s columns over the groups that begin at ``starts`` in ``order``: counters
    summed, ``impact_max`` maxed, ``machine``/``zone``/``game`` those of row ``pick``."""
    cols = {name: table.column(name).to_numpy() for name in SPAN_SCHEMA.names}
    out = {name: cols[name][pick] for name in ("machine", "zone", "game")}
    for name in SUMMED:
        out[name] = np.add.reduceat(cols[name][order], starts)
    out["impact_max"] = np.maximum.reduceat(cols["impact_max"][order], starts)
    return out


def by_header(tables: Sequence[pa.Table]) -> pa.Table:
    """Header rows (``first_ts == last_ts == ts``) summed per header ``(ts, machine, zone)``;
    ``game`` is that of the header's frame (0 when it has only approvals)."""
    table = _concat(tables)
    if not table.num_rows:
        return table
    ts = table.column("first_ts").to_numpy()
    machine = table.column("machine").to_numpy()
    zone = table.column("zone").to_numpy()
    order = np.lexsort((-table.column("frames").to_numpy(), zone, machine, ts))
    starts = _starts(ts[order], machine[order], zone[order])
    header_ts = ts[order][starts]
    columns = reduce_groups(table, order, starts, order[starts])
    return pa.table({**columns, "first_ts": header_ts, "last_ts": header_ts}, schema=SPAN_SCHEMA)


@dataclass
class Paired:
    """Headers with a frame and an in-window approval, and the headers still unpaired."""

    approved: pa.Table
    unpaired: pa.Table
    counts: dict[str, int]


def pair(tables: Sequence[pa.Table]) -> Paired:
    """Sum frames and in-window approvals per header: a header with both is approved (its
    frames counted once each, extra approvals counted as duplicates)."""
    headers = by_header(tables)
    frames = headers.column("frames").to_numpy()
    approvals = headers.column("approvals").to_numpy()
    paired = (frames > 0) & (approvals > 0)
    counts = {
        "join.approved": int(frames[paired].sum()),
        "join.duplicate_approvals": int((approvals[paired] - 1).sum()),
        "join.hits": int(headers.column("n_hits").to_numpy()[paired].sum()),
        "join.hits_undecodable": int(headers.column("n_bad").to_numpy()[paired].sum()),
    }
    mask = pa.array(paired)
    return Paired(headers.filter(mask), headers.filter(pc.invert(mask)), counts)


def spans(approved: pa.Table, gap_ms: int) -> pa.Table:
    """Approved headers summed per machine and ``ts // gap_ms``: frames of one bucket are
    less than a gap apart, so a bucket never spans two sessions. ``zone`` and ``game`` are
    those of the bucket's latest frame."""
    if not approved.num_rows:
        return SPAN_SCHEMA.empty_table()
    first = approved.column("first_ts").to_numpy()
    last = approved.column("last_ts").to_numpy()
    machine = approved.column("machine").to_numpy()
    bucket = first // gap_ms
    order = np.lexsort((last, bucket, machine))
    starts = _starts(machine[order], bucket[order])
    ends = np.append(starts[1:], len(order)) - 1
    columns = reduce_groups(approved, order, starts, order[ends])
    return pa.table(
        {
            **columns,
            "first_ts": np.minimum.reduceat(first[order], starts),
            "last_ts": last[order][ends],
        },
        schema=SPAN_SCHEMA,
    )
