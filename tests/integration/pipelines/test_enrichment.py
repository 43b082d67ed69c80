"""Purchase enrichment end to end: known answers, table semantics, restart from checkpoint."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pipeline_io import assert_group_caught_up, consume_all, other_source, produce

from streamscale.pipelines.enrichment import Enrichment, EnrichmentTopics, pending_versions
from streamscale.pipelines.purchase_batches import REF_UNKNOWN
from streamscale.settings import KafkaSource, Settings

pytestmark = pytest.mark.integration

T0 = 1_767_225_600_000  # 2026-01-01T00:00:00Z


def purchase(tx: str, pid: int, price: str, ts: int) -> tuple[str, str, int, None]:
    return (tx, f'{{"id":{pid},"price":{price}}}', ts, None)


def product(pid: int, name: str | None, ts: int) -> tuple[str, str | None, int, None]:
    value = None if name is None else json.dumps({"id": pid, "name": name})
    return (str(pid), value, ts, None)


def run(spark: Any, pipeline: Enrichment) -> Any:
    query = pipeline.start(spark, {"availableNow": True})
    query.awaitTermination(300)
    assert query.exception() is None, query.exception()
    return query


def enriched(settings: Settings, topic: str) -> dict[str, dict[str, Any]]:
    out = {}
    for record in consume_all(settings, topic, 2):
        assert record.key is not None
        out[record.key.decode()] = json.loads(record.value or b"")
    return out


def first_run(
    spark: Any, settings: Settings, topic_factory: Any, checkpoint: Path, source: KafkaSource | None
) -> tuple[EnrichmentTopics, Enrichment]:
    """Renames, a tombstone and an unknown product in one run: the known answers."""
    topics = EnrichmentTopics(
        purchases=topic_factory(2, "achats"),
        referential=topic_factory(2, "referentiel", {"cleanup.policy": "compact"}),
        output=topic_factory(2, "enrichis"),
        dlq=topic_factory(1, "dlq"),
    )
    produce(
        settings,
        topics.referential,
        [
            product(1, "Amber Kettle 1", T0),
            product(2, "Brisk Drum 2", T0),
            product(3, "Cobalt Oar 3", T0),
            product(2, "Brisk Drum 2 v2", T0 + 20),  # rename, between t1 and t2
            product(3, None, T0 + 20),  # tombstone, between t3 and t4
        ],
    )
    produce(
        settings,
        topics.purchases,
        [
            purchase("t1", 2, "10.00", T0 + 10),  # before the rename: old name
            purchase("t2", 2, "11.50", T0 + 30),  # after it: new name
            purchase("t3", 3, "5", T0 + 10),  # before the tombstone: known
            purchase("t4", 3, "5.25", T0 + 30),  # after it: unknown
            purchase("t5", 99, "1.99", T0 + 10),  # never in the referential
            purchase("t6", 2, "999.99", T0 + 20),  # same timestamp as the rename: renamed
        ],
    )
    first = Enrichment(settings, str(checkpoint), topics, source)
    query = run(spark, first)
    assert_state_operator(query)
    assert_group_caught_up(spark, settings, query, [topics.purchases, topics.referential])

    out = enriched(settings, topics.output)
    assert out == {
        "t1": {"id": 2, "name": "Brisk Drum 2", "price": 10.0},
        "t2": {"id": 2, "name": "Brisk Drum 2 v2", "price": 11.5},
        "t3": {"id": 3, "name": "Cobalt Oar 3", "price": 5.0},
        "t4": {"id": 3, "name": REF_UNKNOWN, "price": 5.25},
        "t5": {"id": 99, "name": REF_UNKNOWN, "price": 1.99},
        "t6": {"id": 2, "name": "Brisk Drum 2 v2", "price": 999.99},
    }
    raw = {r.key: r.value for r in consume_all(settings, topics.output, 2)}
    assert raw[b"t3"] == b'{"id":3,"name":"Cobalt Oar 3","price":5.00}'  # DECIMAL(10,2)
    totals = sum_counts(first, query)
    assert totals["purchases"] == 6 and totals["enriched"] == 6 and totals["unknown"] == 2
    assert totals["referential"] == 5 and totals["referential_applied"] == 5
    # The state is Spark's: the table in the state store (RocksDB changelog files by default)
    # and nothing of the pipeline's own beside Spark's directories.
    names = {p.name for p in checkpoint.iterdir() if not p.name.startswith(".")}
    assert "state" in names and names <= {"commits", "metadata", "offsets", "sources", "state"}
    if settings.state_store == "rocksdb":
        assert list((checkpoint / "state").rglob("*.changelog"))
    # One entry per product; with one batch the watermark never passed a version: all are
    # pending (3's tombstone too, until a fold drops the entry).
    assert table_state(spark, checkpoint) == {
        1: (None, [(T0, "Amber Kettle 1")]),
        2: (None, [(T0, "Brisk Drum 2"), (T0 + 20, "Brisk Drum 2 v2")]),
        3: (None, [(T0, "Cobalt Oar 3"), (T0 + 20, None)]),
    }
    return topics, first


def test_table_semantics_and_restart_keep_every_name(
    spark: Any, settings: Settings, topic_factory: Any, checkpoint: Path
) -> None:
    """On the pipeline's default source (``auto``)."""
    settings = settings.model_copy(update={"kafka_source": "auto"})
    topics, first = first_run(spark, settings, topic_factory, checkpoint, None)
    assert first.source == Enrichment.default_source

    # Restart from the checkpoint in a fresh pipeline object: the table is rebuilt from the
    # compacted topic; later updates and purchases continue from it.
    produce(settings, topics.referential, [product(1, "Amber Kettle 1 v2", T0 + 50)])
    produce(
        settings,
        topics.purchases,
        [
            purchase("t7", 2, "3.00", T0 + 40),  # renamed in the first run
            purchase("t8", 3, "3.00", T0 + 40),  # deleted in the first run
            purchase("t9", 1, "3.00", T0 + 40),  # before its second rename
            purchase("t10", 1, "3.00", T0 + 60),  # after it
        ],
    )
    second = Enrichment(settings, str(checkpoint), topics)
    assert second.source == Enrichment.default_source
    query = run(spark, second)
    out = enriched(settings, topics.output)
    assert len(out) == 10
    assert {k: out[k]["name"] for k in ("t7", "t8", "t9", "t10")} == {
        "t7": "Brisk Drum 2 v2",
        "t8": REF_UNKNOWN,
        "t9": "Amber Kettle 1",
        "t10": "Amber Kettle 1 v2",
    }
    assert sum_counts(second, query)["purchases"] == 4
    assert consume_all(settings, topics.dlq, 1) == []


def test_table_semantics_on_the_other_source(
    spark: Any, settings: Settings, topic_factory: Any, checkpoint: Path
) -> None:
    """The same answers when the pipeline reads with the source it does not pick itself (its
    referential offsets come from the checkpoint's offset log either way)."""
    source = other_source(Enrichment.default_source)
    _, pipeline = first_run(spark, settings, topic_factory, checkpoint, source)
    assert pipeline.source == source


def sum_counts(pipeline: Enrichment, query: Any) -> dict[str, int]:
    totals: dict[str, int] = {}
    for progress in query.recentProgress:
        counts = pipeline.batch_counts(progress)
        assert counts.get("purchases", 0) == counts.get("enriched", 0) + counts.get(
            "purchases_dlq", 0
        ), counts
        for key, value in counts.items():
            totals[key] = totals.get(key, 0) + value
    return totals


def assert_state_operator(query: Any) -> None:
    """The query ran Spark's stateful operator (its figures in the progress)."""
    operators = [op for p in query.recentProgress for op in (p.stateOperators or [])]
    assert operators, "no state operator in the query's progress"


def table_state(spark: Any, checkpoint: Path) -> dict[int, tuple[str | None, list[Any]]]:
    """The table operator's state, read with Spark's state data source: product id → (folded
    name, pending versions as (timestamp, name)); names decoded from their JSON text."""
    rows = spark.read.format("statestore").load(str(checkpoint)).collect()
    out = {}
    for row in rows:
        entry = row.value.groupState if "groupState" in row.value else row.value
        folded = None if entry.name is None else json.loads(entry.name)
        pending = [
            (ts, None if name is None else json.loads(name))
            for ts, name in pending_versions(entry.pending)
        ]
        out[row.key.value if "value" in row.key else row.key[0]] = (folded, pending)
    return out


def as_of(
    products: list[tuple[str, str | None, int, None]], pid: int, ts: int
) -> str:  # the rule of enrichment.py, over every referential record
    name = REF_UNKNOWN
    for key, value, stamp, _ in products:
        if int(key) == pid and stamp <= ts:
            name = REF_UNKNOWN if value is None else json.loads(value)["name"]
    return name


def test_a_batch_limit_smaller_than_the_referential_changes_no_name(
    spark: Any, settings: Settings, topic_factory: Any, checkpoint: Path
) -> None:
    """Batches of 40 purchases over a referential of 450 records (issue 14's bug: batches
    cut the referential too, and purchases of the first batches missed products and renames
    older than themselves), renames ahead of some purchases, then a restart from Spark's
    checkpoint while a rename read in the first run is still pending in the state store."""
    # A fold point 0.5 s behind the newest purchase: more than the purchases' disorder across
    # the two partitions (a batch reads about 20 of each, 5 ms apart), so the fold changes
    # no name, and less than their span, so versions are folded during the run.
    settings = settings.model_copy(update={"max_offsets_per_trigger": 40, "watermark_delay_s": 0.5})
    topics = EnrichmentTopics(
        purchases=topic_factory(2, "achats"),
        referential=topic_factory(2, "referentiel", {"cleanup.policy": "compact"}),
        output=topic_factory(2, "enrichis"),
        dlq=topic_factory(1, "dlq"),
    )
    products = [product(i, f"P{i}", T0) for i in range(1, 301)]
    products += [product(i, f"P{i} v2", T0 + 100) for i in range(1, 101)]
    products += [product(i, f"P{i} v3", T0 + 1_000) for i in range(1, 51)]
    products += [product(250, "P250 late", T0 + 5_000), product(300, None, T0 + 1_500)]
    produce(settings, topics.referential, products)
    # Timestamps rise in produce order (so in each partition): 50 ms to 2,045 ms after T0.
    purchases = [purchase(f"a{k}", k % 320 + 1, "1.00", T0 + 50 + 5 * k) for k in range(400)]
    produce(settings, topics.purchases, purchases)

    first = Enrichment(settings, str(checkpoint), topics)
    query = run(spark, first)
    batches = [p for p in query.recentProgress if p.numInputRows]
    assert len(batches) >= 10  # the limit did cut the purchases
    out = enriched(settings, topics.output)
    expected = {tx: as_of(products, json.loads(v)["id"], ts) for tx, v, ts, _ in purchases}
    got = {tx: record["name"] for tx, record in out.items()}
    wrong = {tx: (got.get(tx), name) for tx, name in expected.items() if got.get(tx) != name}
    assert not wrong, f"{len(wrong)} of {len(expected)} purchases misnamed: {wrong}"
    assert {"P1", "P11 v2", "P1 v3", "P299", REF_UNKNOWN} <= set(got.values())
    # In the state store: 250's first name folded (the watermark passed it), its rename
    # pending (ahead of every purchase).
    assert table_state(spark, checkpoint)[250] == ("P250", [(T0 + 5_000, "P250 late")])

    # Restart: the rebuilt table keeps the rename of 250 pending, so a purchase older than it
    # still gets the old name.
    later = [purchase("b1", 250, "2.00", T0 + 3_000), purchase("b2", 250, "2.00", T0 + 6_000)]
    produce(settings, topics.purchases, later)
    second = Enrichment(settings, str(checkpoint), topics)
    run(spark, second)
    out = enriched(settings, topics.output)
    assert (out["b1"]["name"], out["b2"]["name"]) == ("P250", "P250 late")
    assert len(out) == 402
