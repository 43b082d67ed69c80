"""Pure parts of the enrichment: the driver-held table, versions, counts, SQL builders."""

from __future__ import annotations

import pyarrow as pa

from streamscale.pipelines import deadletter as dl
from streamscale.pipelines import purchase_batches as pb
from streamscale.pipelines.enrichment import BatchCounts, Table, group_versions


def test_table_applies_in_log_order_and_tombstones_delete() -> None:
    table = Table({1: "old"})
    table.apply(
        [
            (2, (0, 11, 5, None, True)),  # tombstone of 2, after its creation below
            (1, (0, 3, 9, "renamed", False)),
            (2, (0, 10, 5, "two", False)),
            (3, (1, 1, 1, "three", False)),
        ]
    )
    assert table.names == {1: "renamed", 3: "three"}
    assert table.version == 1
    table.apply([])
    assert table.version == 1  # no change, no new version (the cached DataFrame is kept)


def test_versions_read_ahead_stay_pending_until_the_purchases_pass_them() -> None:
    table = Table({1: "one"})
    table.add(
        [
            (1, (0, 4, 300, "one v3", False)),
            (1, (0, 2, 100, "one v2", False)),
            (2, (1, 0, 50, "two", False)),
            (2, (1, 1, 400, None, True)),  # deleted later
        ]
    )
    assert table.names == {1: "one"} and table.version == 0
    assert table.task_versions() == {
        1: [(100, "one v2"), (300, "one v3")],
        2: [(50, "two"), (400, None)],
    }
    assert table.latest() == {1: "one v3"}
    table.fold(150)  # every purchase to come is at 150 or later
    assert table.names == {1: "one v2", 2: "two"} and table.version == 1
    assert table.task_versions() == {1: [(300, "one v3")], 2: [(400, None)]}
    table.fold(120)  # an older fold point changes nothing
    assert table.version == 1
    table.fold(10_000)
    assert table.names == {1: "one v3"} and table.pending == {} and table.version == 2


def test_fold_takes_the_latest_version_by_log_order_not_by_timestamp() -> None:
    table = Table()
    table.add([(7, (0, 1, 200, "late stamp", False)), (7, (0, 2, 100, "early stamp", False))])
    table.fold(150)  # the later record (offset 2) applies; the one before it can no longer
    assert table.names == {7: "early stamp"} and table.pending == {}


def test_tasks_report_each_partitions_newest_purchase() -> None:
    stamps = [5_000, 9_000, 7_000, 1_000]
    batch = pa.RecordBatch.from_arrays(
        [
            pa.array([b"a", b"b", b"c", b"d"]),
            pa.array([b'{"id":1,"price":1.00}'] * 4),
            pa.array(["achats"] * 4),
            pa.array([0, 0, 1, 1], pa.int32()),
            pa.array([0, 1, 0, 1], pa.int64()),
            pa.array([t * 1000 for t in stamps], pa.timestamp("us", tz="UTC")),
        ],
        names=["key", "value", "topic", "partition", "offset", "timestamp"],
    )
    out = pb.Enriched()
    versions = {1: [(6_000, "renamed")]}
    rows = pb.enrich(batch, pb.NameTable.of({1: "first"}), versions, "out", out)
    assert out.newest == {0: 9_000, 1: 7_000}
    assert [v.as_py() for v in rows.column("value")] == [
        b'{"id":1,"name":"first","price":1.00}',
        b'{"id":1,"name":"renamed","price":1.00}',
        b'{"id":1,"name":"renamed","price":1.00}',
        b'{"id":1,"name":"first","price":1.00}',
    ]


def test_group_versions_sorts_each_product_by_log_order() -> None:
    rows = [(7, (0, 5, 100, "b", False)), (8, (1, 1, 50, "x", False)), (7, (0, 2, 200, "a", False))]
    assert group_versions(rows) == {
        7: [(0, 2, 200, "a", False), (0, 5, 100, "b", False)],
        8: [(1, 1, 50, "x", False)],
    }


def test_batch_counts_flatten_with_error_kinds() -> None:
    counts = BatchCounts(purchases=5, enriched=4, purchases_dlq=1, errors={"not_json": 1})
    flat = counts.as_dict()
    assert flat["purchases"] == 5 and flat["enriched"] + flat["purchases_dlq"] == 5
    assert flat["dlq.not_json"] == 1


def test_dead_letter_names_and_sql_literals() -> None:
    assert dl.dlq_topic("enrichment") == "enrichment-dlq"
    assert dl.sql_str("it's a \\ test") == "'it\\'s a \\\\ test'"
    error = dl.json_error_sql("v", "j", {"id": "an id"})
    assert error.startswith("CASE WHEN j._corrupt IS NULL AND j.`id` IS NOT NULL THEN NULL")
    assert "'not_json'" in error and "'wrong_type'" in error and "'missing_field'" in error
