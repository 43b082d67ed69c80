"""Pure parts of the pipelines: the driver-held table, versions, counts, SQL builders."""

from __future__ import annotations

from streamscale.pipelines import deadletter as dl
from streamscale.pipelines.enrichment import BatchCounts, Table, group_versions
from streamscale.pipelines.game_sessions import batch_counts


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


def test_game_batch_counts_from_progress_json() -> None:
    progress = {
        "observedMetrics": {
            "join": {"approved": 3, "unapproved": 1, "late_approvals": 0, "hits": 9},
            "frames_dlq": {"records": 2, "not_json": 2},
            "other": {"x": 1},
        }
    }
    assert batch_counts(progress) == {
        "join.approved": 3,
        "join.unapproved": 1,
        "join.late_approvals": 0,
        "join.hits": 9,
        "frames_dlq.records": 2,
        "frames_dlq.not_json": 2,
    }
    assert batch_counts({}) == {}


def test_dead_letter_names_and_sql_literals() -> None:
    assert dl.dlq_topic("enrichment") == "enrichment-dlq"
    assert dl.sql_str("it's a \\ test") == "'it\\'s a \\\\ test'"
    error = dl.json_error_sql("v", "j", {"id": "an id"})
    assert error.startswith("CASE WHEN j._corrupt IS NULL AND j.`id` IS NOT NULL THEN NULL")
    assert "'not_json'" in error and "'wrong_type'" in error and "'missing_field'" in error


def test_hits_regex_accepts_exactly_what_the_codec_decodes() -> None:
    import random
    import re

    from streamscale.pipelines import hits as codec
    from streamscale.pipelines.game_sessions import hits_regex

    pattern = re.compile(hits_regex().removeprefix("(?i)"), re.IGNORECASE)
    rng = random.Random(3)
    alphabet = "0123456789ABCDEFabcdef"
    samples = ["".join(rng.choice(alphabet) for _ in range(8)) for _ in range(20_000)]
    # valid hits with every code, in both cases, and out-of-range neighbours
    samples += [
        f"{impact:02X}{k}{d}{t}{lv}{g:02X}"
        for impact in (41, 42, 209, 210)
        for k in (0, 1, 2, 3)
        for d in (1, 4, 5)
        for t in (1, 5, 6)
        for lv in (1, 3, 4)
        for g in (0, 1, 8, 9)
    ]
    samples += [s.lower() for s in samples[-50:]]
    for sample in samples:
        try:
            codec.decode_hit(sample)
            valid = True
        except codec.HitDecodeError:
            valid = False
        assert bool(pattern.match(sample)) == valid, sample
    assert pattern.match("2A114101,D1223201")
    assert not pattern.match("2A114101,D12232")
