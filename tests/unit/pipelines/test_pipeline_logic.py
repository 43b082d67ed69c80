"""Pure parts of the enrichment: the driver-held table, versions, counts, SQL builders."""

from __future__ import annotations

from streamscale.pipelines import deadletter as dl
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
