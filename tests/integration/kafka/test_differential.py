"""Differential tests: the ``streamscale-kafka`` source against Spark's Kafka connector.

Each case reads the same topics with both sources under the same options (Trigger.AvailableNow
into ``foreachBatch``; a restart from the checkpoint where a case needs a second run) and
requires the same rows in the same micro-batches, Spark's connector being the reference.
"""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

pytest.register_assert_rewrite("differential_io")

from differential_io import (  # noqa: E402
    OURS,
    SPARK,
    assert_both_fail,
    assert_same,
    both,
    delete_records,
    finish,
    produce,
    records,
    renamed,
    run_both,
    start,
)

from streamscale.settings import Settings  # noqa: E402

pytestmark = pytest.mark.integration

UNEVEN = {0: 10, 1: 400, 2: 1590}


def values(outs: list[Any]) -> set[bytes]:
    return {value for _, _, value, _ in outs}


# which partitions ------------------------------------------------------------------------------


@pytest.mark.parametrize("strategy", ["assign", "subscribe", "subscribePattern"])
def test_assign_subscribe_and_pattern_read_the_same_batches(
    strategy: str, spark: Any, settings: Settings, topic_factory: Any, tmp_path: Path
) -> None:
    tag = uuid.uuid4().hex[:6]
    first = topic_factory(partitions=3, prefix=f"diff{tag}-in")
    # a second topic stamped by the broker: timestampType 1 (LogAppendTime)
    second = topic_factory(
        partitions=2, prefix=f"diff{tag}-in", config={"message.timestamp.type": "LogAppendTime"}
    )
    other = topic_factory(partitions=1, prefix=f"diff{tag}-out")
    produce(settings, first, records({0: 6, 1: 5, 2: 4}))
    produce(settings, second, records({0: 3, 1: 2}))
    produce(settings, other, records({0: 3}))
    chosen = {
        "assign": json.dumps({first: [0, 2], second: [1]}),
        "subscribe": f"{first},{second}",
        "subscribePattern": f"diff{tag}-in-.*",
    }[strategy]
    options = {strategy: chosen, "startingOffsets": "earliest"}
    theirs, ours = both(spark, settings, options, tmp_path)
    assert_same(theirs, ours)
    read = {(row[0], row[1]) for row in theirs.rows()}
    if strategy == "assign":
        assert read == {(first, 0), (first, 2), (second, 1)}
    else:
        assert read == {(first, p) for p in range(3)} | {(second, p) for p in range(2)}
    assert {row[6] for row in theirs.rows() if row[0] == second} == {1}


# where to start --------------------------------------------------------------------------------


def test_starting_offsets_latest_reads_only_records_produced_after_start(
    spark: Any, settings: Settings, topic_factory: Any, tmp_path: Path
) -> None:
    topic = topic_factory(partitions=2, prefix="diff-latest")
    produce(settings, topic, records({0: 5, 1: 5}, tag="before"))
    options = {"subscribe": topic, "startingOffsets": "latest"}
    runs = run_both(spark, settings, options, tmp_path)
    after = records({0: 3, 1: 4}, tag="after")
    produce(settings, topic, after)
    run_both(spark, settings, options, tmp_path, runs)
    assert_same(runs[SPARK], runs[OURS])
    # batch 0 (at the first start) is empty; the restart reads exactly the later records
    assert runs[SPARK].batches[0] == []
    assert {row[4] for row in runs[SPARK].rows()} == values(after)


def test_starting_offsets_json_with_specific_earliest_and_latest(
    spark: Any, settings: Settings, topic_factory: Any, tmp_path: Path
) -> None:
    topic = topic_factory(partitions=3, prefix="diff-json")
    produce(settings, topic, records({0: 8, 1: 8, 2: 8}, tag="before"))
    options = {
        "subscribe": topic,
        "startingOffsets": json.dumps({topic: {"0": 3, "1": -2, "2": -1}}),
    }
    runs = run_both(spark, settings, options, tmp_path)
    produce(settings, topic, records({0: 2, 1: 2, 2: 2}, tag="after"))
    run_both(spark, settings, options, tmp_path, runs)
    assert_same(runs[SPARK], runs[OURS])
    assert runs[SPARK].ranges() == {
        0: {(topic, 0): (3, 7, 5), (topic, 1): (0, 7, 8)},
        1: {(topic, 0): (8, 9, 2), (topic, 1): (8, 9, 2), (topic, 2): (8, 9, 2)},
    }


# how much per batch, in how many tasks ---------------------------------------------------------


def test_max_offsets_per_trigger_cuts_the_same_batches_across_uneven_partitions(
    spark: Any, settings: Settings, topic_factory: Any, tmp_path: Path
) -> None:
    topic = topic_factory(partitions=3, prefix="diff-limit")
    produce(settings, topic, records(UNEVEN))
    options = {"subscribe": topic, "startingOffsets": "earliest", "maxOffsetsPerTrigger": "300"}
    theirs, ours = both(spark, settings, options, tmp_path)
    assert_same(theirs, ours)
    # Spark's shares of 300 over 10 / 400 / 1,590: 1.5 -> 1, 60, 238.5 -> 238 (the rate_limit
    # table in tests/unit/kafka/test_offsets.py holds these figures)
    spark_ranges = theirs.ranges()
    assert spark_ranges[0] == {
        (topic, 0): (0, 0, 1),
        (topic, 1): (0, 59, 60),
        (topic, 2): (0, 237, 238),
    }
    assert spark_ranges[1] == {
        (topic, 0): (1, 1, 1),
        (topic, 1): (60, 118, 59),
        (topic, 2): (238, 475, 238),
    }
    assert all(sum(n for *_, n in parts.values()) <= 300 for parts in spark_ranges.values())
    assert len(theirs.rows()) == sum(UNEVEN.values())


def test_min_partitions_splits_into_the_same_tasks(
    spark: Any, settings: Settings, topic_factory: Any, tmp_path: Path
) -> None:
    topic = topic_factory(partitions=3, prefix="diff-minparts")
    produce(settings, topic, records(UNEVEN))
    options = {"subscribe": topic, "startingOffsets": "earliest", "minPartitions": "8"}
    theirs, ours = both(spark, settings, options, tmp_path)
    assert_same(theirs, ours)
    # 10 stays whole; 400 and 1,590 share the 7 other tasks: 1 and 6 (of 265 records)
    assert len(theirs.tasks[0]) == 8
    assert [t for t in theirs.tasks[0] if t[1] == 2] == [
        (topic, 2, 265 * i, 265 * (i + 1) - 1, 265) for i in range(6)
    ]


# lost records ----------------------------------------------------------------------------------


def test_records_deleted_before_they_are_read_fail_or_are_skipped(
    spark: Any, settings: Settings, topic_factory: Any, tmp_path: Path
) -> None:
    topic = topic_factory(partitions=2, prefix="diff-deleted")
    produce(settings, topic, records({0: 20, 1: 20}))
    options = {"subscribe": topic, "startingOffsets": "earliest"}
    runs = run_both(spark, settings, options, tmp_path)
    produce(settings, topic, records({0: 30, 1: 30}, tag="later"))
    delete_records(settings, topic, {0: 35})  # 20..34 of partition 0 never read

    # restarts of the same queries: with failOnDataLoss (the default) both fail on batch 1...
    failed = run_both(spark, settings, {**options, "failOnDataLoss": "true"}, tmp_path)
    assert_both_fail(failed[SPARK], failed[OURS], topic, "20", "failOnDataLoss")
    # ...without, both read batch 1 again from the earliest offset still there
    run_both(spark, settings, {**options, "failOnDataLoss": "false"}, tmp_path, runs)
    assert_same(runs[SPARK], runs[OURS])
    assert runs[SPARK].ranges()[1] == {(topic, 0): (35, 49, 15), (topic, 1): (20, 49, 30)}


def test_json_start_offsets_out_of_range_fail_or_go_on_from_available_offsets(
    spark: Any, settings: Settings, topic_factory: Any, tmp_path: Path
) -> None:
    topic = topic_factory(partitions=3, prefix="diff-oor")
    produce(settings, topic, records({0: 20, 1: 20, 2: 20}))
    delete_records(settings, topic, {0: 10})
    # partition 0 below its earliest offset (10), partition 1 beyond its end offset (20)
    start = json.dumps({topic: {"0": 3, "1": 25, "2": -2}})
    options = {"subscribe": topic, "startingOffsets": start}

    failed = run_both(spark, settings, {**options, "failOnDataLoss": "true"}, tmp_path / "t")
    assert_both_fail(failed[SPARK], failed[OURS], topic, "25", "failOnDataLoss")

    skip = {**options, "failOnDataLoss": "false"}
    runs = run_both(spark, settings, skip, tmp_path / "f")
    produce(settings, topic, records({0: 5, 1: 5, 2: 5}, tag="later"))
    run_both(spark, settings, skip, tmp_path / "f", runs)
    assert_same(runs[SPARK], runs[OURS])
    # partition 0 from its earliest offset; partition 1 nothing at first, then on from its
    # end offset
    assert runs[SPARK].ranges() == {
        0: {(topic, 0): (10, 19, 10), (topic, 2): (0, 19, 20)},
        1: {(topic, p): (20, 24, 5) for p in range(3)},
    }


# what a row holds ------------------------------------------------------------------------------


def test_include_headers_gives_the_same_headers_column(
    spark: Any, settings: Settings, topic_factory: Any, tmp_path: Path
) -> None:
    topic = topic_factory(partitions=1, prefix="diff-headers")
    produce(
        settings,
        topic,
        [
            (0, b"a", b"two", [("h1", b"x"), ("h2", b"y")]),
            (0, b"b", b"none", None),
            (0, b"c", b"null-value", [("n", None)]),
            (0, b"d", b"empty-value", [("e", b"")]),
            (0, None, None, [("dup", b"1"), ("dup", b"2")]),
        ],
    )
    options = {"subscribe": topic, "startingOffsets": "earliest", "includeHeaders": "true"}
    theirs, ours = both(spark, settings, options, tmp_path)
    assert_same(theirs, ours)
    assert [row[7] for row in theirs.rows()] == [
        (("h1", b"x"), ("h2", b"y")),
        None,
        (("n", None),),
        (("e", b""),),
        (("dup", b"1"), ("dup", b"2")),
    ]


# Trigger.AvailableNow ----------------------------------------------------------------------------


def test_available_now_reads_what_was_there_at_start_in_limited_batches(
    spark: Any, settings: Settings, topic_factory: Any, tmp_path: Path
) -> None:
    """Records produced while the run goes on (in its first batch) are left to the next run.
    Each source reads its own twin topic (same records, same timestamps), since records
    produced during one run would be there at the start of the other."""
    counts = {0: 30, 1: 120}
    options = {"startingOffsets": "earliest", "maxOffsetsPerTrigger": "40"}
    late = records({0: 5, 1: 5}, tag="late")
    stamp = int(time.time() * 1000)  # recent: the broker's retention keeps the records
    started = []
    for source in (SPARK, OURS):
        topic = topic_factory(partitions=2, prefix=f"diff-now-{source}")
        produce(settings, topic, records(counts), timestamp_ms=stamp)

        def produce_late(batch_id: int, topic: str = topic) -> None:
            if batch_id == 0:
                produce(settings, topic, late, timestamp_ms=stamp)

        checkpoint = tmp_path / source
        topic_options = {**options, "subscribe": topic}
        started.append(
            start(spark, settings, source, topic_options, checkpoint, on_batch=produce_late)
        )
    runs = {s.result.source: renamed(finish(s), "T") for s in started}
    theirs, ours = runs[SPARK], runs[OURS]
    assert_same(theirs, ours)
    assert len(theirs.batches) == 4  # 150 records, 40 (or so) a batch
    assert {row[4] for row in theirs.rows()} == values(records(counts))
