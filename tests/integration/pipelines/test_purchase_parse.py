"""The enrichment's purchases parsed in Spark SQL (:func:`enrichment.parse_purchases`, what the
pipeline runs) give the answers of the Python parse (:func:`purchase_batches.parse`, the
reference the differential tests and benchmarks check the pipeline against): the same usable
purchases with the same id and price texts, the same dead letters with the same reasons, on
the compact form producers write and on generated JSON of every other shape."""

from __future__ import annotations

import datetime as dt
import json
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from streamscale.pipelines import purchase_batches as pb
from streamscale.pipelines.enrichment import DEAD, PURCHASE, parse_purchases

pytestmark = pytest.mark.integration

T0 = 1_767_225_600_000
TOPIC = "achats"

Raw = tuple[bytes | None, bytes | None]

numbers = st.one_of(
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=False, allow_infinity=False),
    st.decimals(allow_nan=False, allow_infinity=False, places=3).map(str).map(Decimal),
)
scalars = st.one_of(
    st.none(), st.booleans(), numbers, st.text(max_size=6), st.lists(st.integers(), max_size=2)
)


def _dumps(obj: Any, compact: bool) -> str:
    return json.dumps(obj, separators=(",", ":") if compact else None, default=str)


json_purchase = st.builds(
    lambda fields, compact: _dumps(fields, compact),
    st.dictionaries(st.sampled_from(["id", "price", "x"]), scalars, max_size=3),
    st.booleans(),
)


def _compact(pid: int, cents: int) -> str:
    """A purchase as producers write it (a price of more than 8 digits does not fit)."""
    sign = "-" if cents < 0 else ""
    return f'{{"id":{pid},"price":{sign}{abs(cents) // 100}.{abs(cents) % 100:02d}}}'


compact_purchase = st.builds(
    _compact, st.integers(-(10**18) + 1, 10**18 - 1), st.integers(-(10**10) + 1, 10**10 - 1)
)
value = st.one_of(
    compact_purchase,
    json_purchase,
    st.text(max_size=20),
    compact_purchase.flatmap(lambda t: st.integers(0, len(t)).map(lambda n: t[:n])),
    compact_purchase.map(lambda t: t + "\n"),
    compact_purchase.map(lambda t: t.replace(":", ": ")),
)
record: st.SearchStrategy[Raw] = st.tuples(
    st.one_of(st.none(), st.uuids().map(lambda u: str(u).encode())),
    st.one_of(st.none(), value.map(str.encode), st.binary(max_size=24)),
)
EDGES: list[Raw] = [
    (b"k", b'{"id":1,"price":2.50}'),
    (b"k", b'{"id":1,"price":-0.00}'),
    (b"k", b'{"id":1,"price":-0.0}'),
    (b"k", b'{"id":1,"price":-0.001}'),
    (b"k", b'{"id":1,"price":0.005}'),
    (b"k", b'{"id":1,"price":1.005}'),
    (b"k", b'{"id":1,"price":"2.50"}'),
    (b"k", b'{"id":"1","price":2.50}'),
    (b"k", b'{"id":1.0,"price":2.50}'),
    (b"k", b'{"id":1,"price":1e2}'),
    (b"k", b'{"id":1,"price":99999999.995}'),
    (b"k", b'{"id":9223372036854775807,"price":1}'),
    (b"k", b'{"id":9223372036854775808,"price":1}'),
    (b"k", b'{"price":2.50,"id":7}'),
    (b"k", b'{"id":1,"id":2,"price":2.50}'),
    (b"k", b'{"id":1,"price":2.50,"price":3.00}'),
    (b"k", b'{"id":1,"price":2.50}\n'),
    (b"k", b'{"id":1,"price":2.50} '),
    (b"k", b'\xef\xbb\xbf{"id":1,"price":2.50}'),
    (b"k", b'{"id":1,"price":2.50}\xff'),
    (b"k", b'{"id":1,"price":2.50,"x":"\xe9"}'),
    (b"k", b'{"id":1,"price":2.50,"x":"\xc3\xa9"}'),
    (b"k", b'{"id":1,"price":2.50,"x":"\\ud800"}'),
    (b"k", b"\xff\xfe"),
    (b"k", b'{"id":1,"price":2.50,"x":"\xed\xa0\x80"}'),
    (b"k", '{"id":1,"price":2.50}'.encode("utf-16")),
    (b"k", b' {"id":1,"price":2.50}'),
    (b"k", b'{"id":null,"price":2.50}'),
    (b"k", b'{"id":1}'),
    (b"k", b"{}"),
    (b"k", b"[1,2]"),
    (b"k", b"null"),
    (b"k", b"{bad"),
    (b"k", b""),
    (b"k", None),
    (None, b'{"id":1,"price":2.50}'),
    (None, b"{bad"),
]


Answers = tuple[dict[int, tuple[Any, ...]], dict[int, tuple[Any, ...]]]
"""Usable purchases and dead letters, by offset."""


def python_answers(rows: list[Raw]) -> Answers:
    """The Python parse: usable purchases and dead letters by offset."""
    n = len(rows)
    batch = pa.RecordBatch.from_pydict(
        {
            "key": pa.array([k for k, _ in rows], pa.binary()),
            "value": pa.array([v for _, v in rows], pa.binary()),
            "topic": pa.array([TOPIC] * n, pa.string()),
            "partition": pa.array([0] * n, pa.int32()),
            "offset": pa.array(range(n), pa.int64()),
            "timestamp": pa.array([(T0 + i) * 1000 for i in range(n)], pa.timestamp("us")),
        }
    )
    out = pb.Enriched()
    parsed = pb.parse(batch, out)
    good = {
        r["off"]: (r["key"], r["pid"], r["id_text"], r["price"], r["ts"])
        for r in parsed.to_pylist()
    }
    dead = {d.offset: (d.key, d.value, d.error, d.detail) for d in out.dead}
    return good, dead


def sql_answers(spark: Any, rows: list[Raw]) -> Answers:
    """The Spark SQL parse: usable purchases and dead letters by offset."""
    source = spark.createDataFrame(
        [
            (k, v, TOPIC, 0, i, dt.datetime.fromtimestamp((T0 + i) / 1000, dt.UTC))
            for i, (k, v) in enumerate(rows)
        ],
        "key BINARY, value BINARY, topic STRING, partition INT, offset BIGINT, timestamp TIMESTAMP",
    )
    good: dict[int, tuple[Any, ...]] = {}
    dead: dict[int, tuple[Any, ...]] = {}
    for r in parse_purchases(source).collect():
        key = None if r["key"] is None else bytes(r["key"])
        if r["kind"] == PURCHASE:
            good[r["off"]] = (key, r["pid"], r["id_text"], r["price"], r["ts"])
            continue
        assert r["kind"] == DEAD
        headers = {h["key"]: bytes(h["value"]).decode() for h in r["headers"]}
        assert headers["source.topic"] == TOPIC
        assert (headers["source.partition"], headers["source.offset"]) == ("0", str(r["off"]))
        value = None if r["value"] is None else bytes(r["value"])
        dead[r["off"]] = (key, value, headers["error"], headers["error.detail"])
    return good, dead


def differences(sql: Answers, python: Answers) -> dict[int, tuple[Any, Any]]:
    """Offset -> (the SQL answer, the Python one) where they differ: each a usable purchase or
    a dead letter."""
    return {
        offset: (
            sql[0].get(offset) or sql[1].get(offset),
            python[0].get(offset) or python[1].get(offset),
        )
        for offset in sql[0].keys() | sql[1].keys() | python[0].keys() | python[1].keys()
        if (sql[0].get(offset), sql[1].get(offset))
        != (python[0].get(offset), python[1].get(offset))
    }


def test_the_edges_parse_alike(spark: Any) -> None:
    python = python_answers(EDGES)
    assert differences(sql_answers(spark, EDGES), python) == {}
    good, dead = python
    assert len(good) + len(dead) == len(EDGES) and good and dead


@settings(max_examples=4, deadline=None, suppress_health_check=list(HealthCheck), print_blob=True)
@given(rows=st.lists(record, min_size=1, max_size=300))
@example(rows=[(b"k", b'{"id":1,"price":2.50}')])
def test_generated_purchases_parse_alike(spark: Any, rows: list[Raw]) -> None:
    assert differences(sql_answers(spark, rows), python_answers(rows)) == {}
