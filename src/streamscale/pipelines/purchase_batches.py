"""Purchases as Arrow batches: parsed, named from the referential and written as JSON per column.

The per-task half of the enrichment (:mod:`.enrichment` runs it on Spark's executors through
``mapInArrow``). Pure: pyarrow and NumPy, no Spark, no Kafka.

- A purchase value in the compact form producers write, ``{"id":1234,"price":57.30}`` (an
  integer id, a price with two decimals that fits ``DECIMAL(10,2)``), is recognised by one
  anchored regular expression over the whole column (RE2, in C++), and its output is built by
  joining column pieces: the original id and price text, the name's JSON. Anything else
  takes :func:`check_purchase`, which reads any JSON as Spark's ``from_json`` into
  ``id BIGINT, price DECIMAL(10,2)`` would and names the error of an unusable record.
  A purchase without a key (its transaction id, the output's key) is refused whatever its
  value.
- The executors run the two halves around the state-store operator: :func:`parse` before the
  shuffle (the usable purchases' product id, timestamp and output pieces) and :func:`output`
  after it (the named purchases joined into their JSON records). The operator
  (``jvm/operators``, :mod:`.enrichment`) names them; :func:`enrich` does the same work in
  one process with a :class:`NameTable` (folded names as sorted ids, one NumPy search) and
  the pending versions (:func:`name_as_of`), the reference the tests and benchmarks check
  the pipeline against.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from decimal import ROUND_HALF_UP, Decimal, InvalidOperation
from typing import Any, Final

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from streamscale.pipelines import deadletter as dl
from streamscale.pipelines.deadletter import DeadLetter, Refused

REF_UNKNOWN: Final = "REF INCONNUE"
PRICE_LIMIT: Final = Decimal(10) ** 8  # DECIMAL(10,2): 8 digits before the point
PURCHASE_PATTERN: Final = (
    r'^\{"id":(?P<id>0|-?[1-9][0-9]{0,17}),"price":(?P<price>-?(?:0|[1-9][0-9]{0,7})\.[0-9]{2})\}$'
)
"""A purchase exactly as the generator writes it (ids of at most 18 digits fit a BIGINT)."""

PURCHASE_FIELDS: Final = {"id": "an integer product id", "price": "a decimal"}
_WHAT = "purchase value"
_UNKNOWN_JSON = json.dumps(REF_UNKNOWN)

VersionName = tuple[int, str | None]
"""A referential version of the batch: its Kafka timestamp (ms) and name (None: deleted)."""


@dataclass(frozen=True)
class NameTable:
    """The referential as sorted product ids and their names as JSON strings."""

    ids: Any = field(default_factory=lambda: np.zeros(0, np.int64))
    names: pa.Array = field(default_factory=lambda: pa.array([], pa.string()))

    @classmethod
    def of(cls, names: Mapping[int, str]) -> NameTable:
        ids = np.fromiter(names, np.int64, count=len(names))
        order = np.argsort(ids, kind="stable")
        texts = [json.dumps(names[int(i)]) for i in ids[order]]
        return cls(ids[order], pa.array(texts, pa.string()))

    def lookup(self, pids: Any) -> tuple[Any, Any]:
        """Index into :attr:`names` and whether each id is known."""
        if not len(self.ids):
            return np.zeros(len(pids), np.int64), np.zeros(len(pids), bool)
        at = np.searchsorted(self.ids, pids)
        at = np.minimum(at, len(self.ids) - 1)
        return at, self.ids[at] == pids


def name_as_of(versions: Sequence[VersionName], ts_ms: int) -> str | bool | None:
    """The name a purchase at ``ts_ms`` sees among its product's versions of the batch (in
    log order): the latest with a timestamp ≤ the purchase's; False when none applies (the
    table before the batch does), None when that version is a tombstone."""
    for version_ts, name in reversed(versions):
        if version_ts <= ts_ms:
            return name
    return False


def check_purchase(raw: bytes | None) -> tuple[int, str]:
    """``(id, price text with two decimals)`` of a purchase in any JSON form, or
    :class:`Refused` with Spark's reading of the same record (``from_json`` into
    ``id BIGINT, price DECIMAL(10,2)``: a fractional or too large id, a non-number price or
    one that does not fit are of the wrong type; the price is rounded half up)."""
    if raw is None:
        raise Refused(dl.NULL_VALUE, f"{_WHAT} is null")
    try:
        # Strict UTF-8, as RFC 8259 and the SQL parse: json.loads of the bytes themselves
        # would also take a byte-order mark, UTF-16 and UTF-32.
        obj = json.loads(raw.decode(), parse_float=Decimal)
    except (ValueError, RecursionError):  # UnicodeDecodeError included
        raise Refused(dl.NOT_JSON, f"{_WHAT} is not a JSON object") from None
    if not isinstance(obj, dict):
        raise Refused(dl.NOT_JSON, f"{_WHAT} is not a JSON object")
    pid, price = obj.get("id"), obj.get("price")
    wrong = Refused(
        dl.WRONG_TYPE,
        f"{_WHAT} has a field of the wrong type (expected "
        + ", ".join(f"{f} {d}" for f, d in PURCHASE_FIELDS.items())
        + ")",
    )
    if pid is not None and (type(pid) is not int or not -(2**63) <= pid < 2**63):
        raise wrong
    if price is not None:
        if isinstance(price, bool) or not isinstance(price, int | Decimal):
            raise wrong
        try:
            price = Decimal(price).quantize(Decimal("0.01"), rounding=ROUND_HALF_UP)
        except InvalidOperation:
            raise wrong from None
        if abs(price) >= PRICE_LIMIT:
            raise wrong
    for name, desc in PURCHASE_FIELDS.items():
        if obj.get(name) is None:
            raise Refused(dl.MISSING_FIELD, f"{_WHAT} has no {name} ({desc})")
    assert isinstance(pid, int) and isinstance(price, Decimal)
    return pid, format(price, "f")


@dataclass
class Enriched:
    """What one task made of its purchases: dead letters and counts."""

    dead: list[DeadLetter] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)

    def count(self, name: str, n: int = 1) -> None:
        if n:
            self.counts[name] = self.counts.get(name, 0) + int(n)


def _refuse(batch: pa.RecordBatch, i: int, exc: Refused, out: Enriched) -> None:
    """Dead-letter purchase ``i`` of ``batch``."""
    out.dead.append(
        DeadLetter(
            batch.column("key")[i].as_py(),
            batch.column("value")[i].as_py(),
            batch.column("topic")[i].as_py(),
            batch.column("partition")[i].as_py(),
            batch.column("offset")[i].as_py(),
            exc.error,
            exc.detail,
        )
    )
    out.count("purchases_dlq")
    out.count(f"dlq.{exc.error}")


PARSED_SCHEMA: Final = pa.schema(
    [
        ("key", pa.binary()),
        ("pid", pa.int64()),
        ("id_text", pa.string()),
        ("price", pa.string()),
        ("ts", pa.int64()),
        ("part", pa.int32()),
        ("off", pa.int64()),
    ]
)
"""A usable purchase: its key (transaction id), product id, the id and price texts of its
output, Kafka timestamp (ms), partition and offset."""


def parse(batch: pa.RecordBatch, out: Enriched) -> pa.RecordBatch:
    """The usable purchases of ``batch`` (the source's columns) as :data:`PARSED_SCHEMA`;
    unusable ones are added to ``out.dead``."""
    n = batch.num_rows
    out.count("purchases", n)
    stamps = pc.cast(batch.column("timestamp"), pa.int64()).to_numpy(zero_copy_only=False) // 1000
    values = batch.column("value")
    text = values.view(pa.string()) if pa.types.is_binary(values.type) else values
    matched = pc.extract_regex(text, PURCHASE_PATTERN)
    usable = matched.is_valid().to_numpy(zero_copy_only=False).copy()
    id_text = pc.struct_field(matched, "id")
    price_text = pc.struct_field(matched, "price")
    pids = pc.fill_null(pc.cast(id_text, pa.int64()), 0).to_numpy(zero_copy_only=False).copy()
    # A purchase without its transaction id (the key the output is keyed by) cannot be
    # enriched or traced: refused whatever its value.
    no_key = batch.column("key").is_null().to_numpy(zero_copy_only=False)
    for i in np.flatnonzero(no_key).tolist():
        _refuse(batch, i, Refused(dl.NULL_KEY, "purchase key (transaction id) is null"), out)
    usable &= ~no_key
    slow = np.flatnonzero(~usable & ~no_key).tolist()
    if slow:
        ids_list, prices_list = id_text.to_pylist(), price_text.to_pylist()
        for i in slow:
            try:
                pid, price = check_purchase(values[i].as_py())
            except Refused as exc:
                _refuse(batch, i, exc, out)
                continue
            usable[i] = True
            pids[i] = pid
            ids_list[i], prices_list[i] = str(pid), price
        id_text, price_text = pa.array(ids_list, pa.string()), pa.array(prices_list, pa.string())
    keep = pa.array(usable)
    key = batch.column("key")
    return pa.RecordBatch.from_arrays(
        [
            (key if pa.types.is_binary(key.type) else pc.cast(key, pa.binary())).filter(keep),
            pa.array(pids).filter(keep),
            id_text.filter(keep),
            price_text.filter(keep),
            pa.array(stamps, pa.int64()).filter(keep),
            pc.cast(batch.column("partition"), pa.int32()).filter(keep),
            pc.cast(batch.column("offset"), pa.int64()).filter(keep),
        ],
        schema=PARSED_SCHEMA,
    )


def name_json(names: Sequence[str | None]) -> pa.Array:
    """Names as the JSON texts the output carries (None stays None: a tombstone)."""
    return pa.array([None if n is None else json.dumps(n) for n in names], pa.string())


def output(named: pa.RecordBatch, output_topic: str, out: Enriched) -> pa.RecordBatch:
    """Sink rows (``key, value, topic``) of named purchases (``key, id_text, price`` and
    ``name``, the name's JSON text or null when unknown), counted as enriched."""
    names = pc.fill_null(named.column("name"), pa.scalar(_UNKNOWN_JSON))
    out.count("unknown", named.column("name").null_count)
    out.count("enriched", named.num_rows)
    value = pc.binary_join_element_wise(
        '{"id":',
        named.column("id_text"),
        ',"name":',
        names,
        ',"price":',
        named.column("price"),
        "}",
        "",
    )
    return pa.RecordBatch.from_arrays(
        [
            named.column("key"),
            value.cast(pa.binary()),
            pa.array([output_topic] * named.num_rows, pa.string()),
        ],
        names=["key", "value", "topic"],
    )


def enrich(
    batch: pa.RecordBatch,
    table: NameTable,
    versions: Mapping[int, Sequence[VersionName]],
    output_topic: str,
    out: Enriched,
) -> pa.RecordBatch:
    """The pipeline's answer in one process, the reference its tests and benchmarks check the
    engine against: :func:`parse`, name each purchase from ``table`` (the folded names) and
    its product's ``versions`` (:func:`name_as_of`, the rule the state-store operator
    applies), :func:`output`."""
    parsed = parse(batch, out)
    pids = parsed.column("pid").to_numpy(zero_copy_only=False)
    stamps = parsed.column("ts").to_numpy(zero_copy_only=False)
    at, known = table.lookup(pids)
    names: list[str | None] = [
        table.names[int(i)].as_py() if k else None for i, k in zip(at, known, strict=True)
    ]
    for i, pid in enumerate(pids.tolist()):
        if pid in versions:
            name = name_as_of(versions[pid], int(stamps[i]))
            if name is not False:
                names[i] = None if name is None else json.dumps(name)
    named = pa.RecordBatch.from_arrays(
        [parsed.column(c) for c in ("key", "id_text", "price")] + [pa.array(names, pa.string())],
        names=["key", "id_text", "price", "name"],
    )
    return output(named, output_topic, out)
