"""Pure parts of the enrichment: the as-of rule, the tasks' Arrow work, counts, SQL builders.

The table's fold and its state live in the JVM operator (``jvm/operators``); the integration
tests read its state store back (``tests/integration/pipelines/test_enrichment.py``)."""

from __future__ import annotations

import json
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from streamscale.pipelines import deadletter as dl
from streamscale.pipelines import purchase_batches as pb
from streamscale.pipelines.enrichment import (
    VERSION,
    BatchCounts,
    keyed_schema,
    referential_versions,
)


@pytest.mark.parametrize(
    ("versions", "ts", "expected"),
    [
        ([], 100, False),  # no version: the folded table applies
        ([(100, "a")], 99, False),  # newer than the purchase
        ([(100, "a")], 100, "a"),  # a tie goes to the referential
        ([(50, "a"), (80, None)], 90, None),  # a tombstone deletes
        ([(200, "late stamp"), (100, "early stamp")], 250, "early stamp"),  # log order wins
        ([(200, "late stamp"), (100, "early stamp")], 150, "early stamp"),
        ([(200, "late stamp"), (100, "early stamp")], 99, False),
    ],
)
def test_name_as_of_takes_the_latest_version_by_log_order_at_or_before_the_purchase(
    versions: list[tuple[int, str | None]], ts: int, expected: str | bool | None
) -> None:
    assert pb.name_as_of(versions, ts) == expected


@given(
    st.lists(st.tuples(st.integers(0, 50), st.one_of(st.none(), st.text(max_size=3))), max_size=8),
    st.integers(-5, 60),
)
def test_name_as_of_is_the_last_applicable_version(
    versions: list[tuple[int, str | None]], ts: int
) -> None:
    applicable = [name for stamp, name in versions if stamp <= ts]
    assert pb.name_as_of(versions, ts) == (applicable[-1] if applicable else False)


def source_batch(
    records: list[tuple[bytes | None, bytes | None, int]], topic: str = "achats"
) -> pa.RecordBatch:
    n = len(records)
    return pa.RecordBatch.from_arrays(
        [
            pa.array([k for k, _, _ in records], pa.binary()),
            pa.array([v for _, v, _ in records], pa.binary()),
            pa.array([topic] * n, pa.string()),
            pa.array([i % 2 for i in range(n)], pa.int32()),
            pa.array(range(n), pa.int64()),
            pa.array([t * 1000 for _, _, t in records], pa.timestamp("us", tz="UTC")),
        ],
        names=["key", "value", "topic", "partition", "offset", "timestamp"],
    )


def test_parse_keys_usable_purchases_by_product_id_and_output_joins_their_json() -> None:
    batch = source_batch(
        [
            (b"a", b'{"id":1,"price":1.00}', 5_000),
            (b"b", b'{ "price": 2.5, "id": 7 }', 6_000),  # any JSON: read as Spark would
            (b"c", b"not json", 7_000),
            (b"d", b'{"id":9,"price":3.10}', 8_000),
        ]
    )
    out = pb.Enriched()
    parsed = pb.parse(batch, out)
    assert parsed.column("pid").to_pylist() == [1, 7, 9]
    assert parsed.column("ts").to_pylist() == [5_000, 6_000, 8_000]
    assert parsed.column("price").to_pylist() == ["1.00", "2.50", "3.10"]
    assert [(d.offset, d.error) for d in out.dead] == [(2, dl.NOT_JSON)]
    named = pa.RecordBatch.from_arrays(
        [
            parsed.column("key"),
            parsed.column("id_text"),
            parsed.column("price"),
            pa.array([json.dumps("Été"), None, json.dumps('say "hi"')], pa.string()),
        ],
        names=["key", "id_text", "price", "name"],
    )
    sink = pb.output(named, "out", out)
    assert sink.column("value").to_pylist() == [
        b'{"id":1,"name":"\\u00c9t\\u00e9","price":1.00}',
        b'{"id":7,"name":"REF INCONNUE","price":2.50}',
        b'{"id":9,"name":"say \\"hi\\"","price":3.10}',
    ]
    assert out.counts == {
        "purchases": 4,
        "purchases_dlq": 1,
        "dlq.not_json": 1,
        "enriched": 3,
        "unknown": 1,
    }


def test_enrich_names_from_the_folded_table_and_the_pending_versions() -> None:
    batch = source_batch(
        [(b"a", b'{"id":1,"price":1.00}', t) for t in (5_000, 9_000, 7_000, 1_000)]
    )
    out = pb.Enriched()
    versions = {1: [(6_000, "renamed")]}
    rows = pb.enrich(batch, pb.NameTable.of({1: "first"}), versions, "out", out)
    assert [v.as_py() for v in rows.column("value")] == [
        b'{"id":1,"name":"first","price":1.00}',
        b'{"id":1,"name":"renamed","price":1.00}',
        b'{"id":1,"name":"renamed","price":1.00}',
        b'{"id":1,"name":"first","price":1.00}',
    ]


def test_referential_versions_carry_json_names_and_dead_letter_the_bad_ones() -> None:
    batch = pa.RecordBatch.from_pydict(
        {
            "key": [b"1", b"2", b"x"],
            "value": [b'{"id":1,"name":"One"}', None, b"{}"],
            "topic": ["referentiel"] * 3,
            "partition": pa.array([0, 1, 0], pa.int32()),
            "offset": pa.array([4, 2, 5], pa.int64()),
            "pid": pa.array([1, 2, None], pa.int64()),
            "name": ["One", None, None],
            "deleted": [False, True, False],
            "ts_ms": pa.array([100, 200, 300], pa.int64()),
            "error": [None, None, dl.WRONG_TYPE],
            "detail": [None, None, "referential key is not an integer product id"],
        }
    )
    out = pb.Enriched()
    rows = referential_versions(batch, out)
    assert rows.schema == keyed_schema()
    assert rows.select(["kind", "pid", "name", "ts", "part", "off"]).to_pylist() == [
        {"kind": VERSION, "pid": 1, "name": '"One"', "ts": 100, "part": 0, "off": 4},
        {"kind": VERSION, "pid": 2, "name": None, "ts": 200, "part": 1, "off": 2},
    ]
    assert [(d.offset, d.error) for d in out.dead] == [(5, dl.WRONG_TYPE)]
    assert out.counts == {
        "referential": 3,
        "referential_dlq": 1,
        "dlq.wrong_type": 1,
        "referential_applied": 2,
    }


def test_batch_counts_add_tasks_counts_and_flatten_with_error_kinds() -> None:
    counts = BatchCounts()
    counts.add({"purchases": 3, "enriched": 2, "purchases_dlq": 1, "dlq.not_json": 1})
    counts.add({"purchases": 2, "enriched": 2})
    flat = counts.as_dict()
    assert flat["purchases"] == 5 and flat["enriched"] + flat["purchases_dlq"] == 5
    assert flat["dlq.not_json"] == 1


def test_dead_letter_names_and_sql_literals() -> None:
    assert dl.dlq_topic("enrichment") == "enrichment-dlq"
    assert dl.sql_str("it's a \\ test") == "'it\\'s a \\\\ test'"
    error = dl.json_error_sql("v", "j", {"id": "an id"})
    assert error.startswith(
        "CASE WHEN j._corrupt IS NULL AND j.`id` IS NOT NULL AND is_valid_utf8(v) THEN NULL"
    )
    assert "WHEN NOT is_valid_utf8(v) THEN 'not_json'" in error  # before any field's check
    assert "'not_json'" in error and "'wrong_type'" in error and "'missing_field'" in error


def test_the_sql_purchase_pattern_is_the_python_one_in_javas_dialect() -> None:
    import re

    from streamscale.pipelines.enrichment import sql_purchase_pattern

    java = sql_purchase_pattern()
    assert "(?P<" not in java and java.endswith(r"\z") and java.startswith("^")
    # The same language: Python's re reads \z as \Z (the end of the text, no line break).
    python = re.compile(java.removesuffix(r"\z") + r"\Z")
    for text, groups in [
        ('{"id":12,"price":3.50}', ("12", "3.50")),
        ('{"id":-7,"price":-0.05}', ("-7", "-0.05")),
        ('{"id":12,"price":3.50}\n', None),
        ('{"id":012,"price":3.50}', None),
        ('{"id":1,"price":3.5}', None),
        ('{"id":1,"price":123456789.00}', None),
    ]:
        match = python.match(text)
        assert (match.groups() if match else None) == groups
        ref = re.match(pb.PURCHASE_PATTERN.removesuffix("$") + r"\Z", text)
        assert (ref.group("id", "price") if ref else None) == groups


def test_dead_letter_headers_sql_lists_the_headers_in_order() -> None:
    sql = dl.headers_sql("e", "d", "t", "p", "o")
    keys = [dl.HEADER_ERROR, dl.HEADER_DETAIL, dl.HEADER_TOPIC, dl.HEADER_PARTITION]
    at = [sql.index(f"'{k}'") for k in [*keys, dl.HEADER_OFFSET]]
    assert at == sorted(at) and sql.startswith("array(named_struct(")
    assert "CAST(CAST(p AS STRING) AS BINARY)" in sql and "CAST(e AS BINARY)" in sql


@pytest.mark.parametrize(
    ("sizes", "dead"), [([], []), ([0], [0]), ([3], [0]), ([2, 0, 4], [1, 0, 2]), ([0], [3])]
)
def test_write_task_for_the_jvm_writer_yields_sink_rows_then_one_counts_row(
    sizes: list[int], dead: list[int]
) -> None:
    from streamscale.kafka.options import headers_arrow_type
    from streamscale.kafka.transactions import JVM_COLUMNS
    from streamscale.pipelines.enrichment import WriteTask

    def letter(i: int) -> list[dict[str, Any]]:
        return [
            {"key": "error", "value": b"not_json"},
            {"key": "error.detail", "value": b"purchase value is not a JSON object"},
            {"key": "source.offset", "value": str(i).encode()},
        ]

    def named(n: int, d: int) -> pa.RecordBatch:
        """What the operator emits: ``n`` named purchases, then ``d`` passed-through bad ones."""
        return pa.RecordBatch.from_pydict(
            {
                "key": [str(i).encode() for i in range(n + d)],
                "id_text": [str(i) for i in range(n)] + [None] * d,
                "price": ["1.5"] * n + [None] * d,
                "name": [None if i % 2 else '"n"' for i in range(n)] + [None] * d,
                "value": [None] * n + [b"{bad"] * d,
                "headers": [None] * n + [letter(i) for i in range(d)],
            },
            schema=pa.schema(
                [
                    ("key", pa.binary()),
                    ("id_text", pa.string()),
                    ("price", pa.string()),
                    ("name", pa.string()),
                    ("value", pa.binary()),
                    ("headers", headers_arrow_type()),
                ]
            ),
        )

    task = WriteTask("out", None, "dlq")
    out = list(task(iter([named(n, d) for n, d in zip(sizes, dead, strict=True)])))
    names = [name for name, _ in JVM_COLUMNS]
    assert all(b.schema.names == names for b in out)
    rows = pa.Table.from_batches(out).to_pylist()
    written, last = rows[:-1], rows[-1]
    assert len(written) == sum(sizes) + sum(dead)
    outputs = [r for r in written if r["topic"] == "out"]
    letters = [r for r in written if r["topic"] == "dlq"]
    assert len(outputs) == sum(sizes) and len(letters) == sum(dead)
    assert all(r["counts"] is None and r["value"] and r["headers"] is None for r in outputs)
    assert all(r["value"] == b"{bad" and r["headers"][0]["value"] == b"not_json" for r in letters)
    assert last["value"] is None and last["topic"] is None
    counts = json.loads(last["counts"])
    assert counts.get("enriched", 0) == sum(sizes)
    assert counts.get("unknown", 0) == sum(n // 2 for n in sizes)
    assert counts.get("purchases", 0) == sum(sizes) + sum(dead)
    assert counts.get("purchases_dlq", 0) == counts.get("dlq.not_json", 0) == sum(dead)
