"""Bad records of both pipelines go to ``<pipeline>-dlq`` with their bytes and reasons; the
pipelines keep running and their counts reconcile; the same with exactly-once delivery (the
enrichment's driver writes the referential's dead letters, its tasks the purchases'; the
game sessions' first step its dead letters), read back read_committed."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pipeline_io import Consumed, consume_all, produce

from streamscale.pipelines import hits as codec
from streamscale.pipelines.enrichment import Enrichment, EnrichmentTopics
from streamscale.pipelines.game_sessions import GameSessions, GameTopics
from streamscale.settings import Settings

pytestmark = pytest.mark.integration

T0 = 1_767_225_600_000


def by_value(records: list[Consumed]) -> dict[bytes | None, Consumed]:
    return {r.value: r for r in records}


def offsets_by_value(
    records: list[tuple[Any, Any, int, None]], offsets: list[tuple[int, int]]
) -> dict[bytes | None, tuple[int, int]]:
    return {
        (value.encode() if isinstance(value, str) else value): where
        for (_, value, _, _), where in zip(records, offsets, strict=True)
    }


def check_source(
    letter: Consumed, topic: str, produced: dict[bytes | None, tuple[int, int]]
) -> None:
    partition, offset = produced[letter.value]
    assert letter.header("source.topic") == topic
    assert (int(letter.header("source.partition")), int(letter.header("source.offset"))) == (
        partition,
        offset,
    )


@pytest.mark.parametrize("delivery", ["at-least-once", "exactly-once"])
def test_enrichment_dead_letters_each_bad_record_and_keeps_going(
    spark: Any, settings: Settings, topic_factory: Any, checkpoint: Path, delivery: str
) -> None:
    settings = settings.model_copy(update={"delivery": delivery})
    topics = EnrichmentTopics(
        purchases=topic_factory(1, "achats"),
        referential=topic_factory(1, "referentiel"),
        output=topic_factory(1, "enrichis"),
        dlq=topic_factory(1, "dlq"),
    )
    bad_products: list[tuple[Any, Any, int, None]] = [
        (None, '{"id":5,"name":"No Key"}', T0, None),  # null key
        ("abc", '{"id":5,"name":"Bad Key"}', T0, None),  # key not an integer
        ("6", "not json", T0, None),
        ("7", '{"id":7}', T0, None),  # no name
        ("8", '{"id":8,"name":["a"]}', T0, None),  # name of the wrong type
        ("9", '{"id":10,"name":"Mismatch"}', T0, None),  # value id differs from the key
        ("11", b'{"id":11,"name":"Caf\xe9"}', T0, None),  # Latin-1, not UTF-8: not JSON
    ]
    ref_records = [("1", '{"id":1,"name":"Good One"}', T0, None), *bad_products]
    ref_offsets = produce(settings, topics.referential, ref_records)
    bad_purchases: list[tuple[Any, Any, int, None]] = [
        ("p-json", "{bad", T0 + 1, None),
        ("p-type", '{"id":"one","price":1.00}', T0 + 1, None),
        ("p-missing", '{"price":1.00}', T0 + 1, None),
        ("p-null", None, T0 + 1, None),
        ("p-array", "[1,2]", T0 + 1, None),
        ("p-bytes", b'{"id":1,"price":2.50}\xff', T0 + 1, None),  # not UTF-8
    ]
    purchase_records = [("p-ok", '{"id":1,"price":2.50}', T0 + 1, None), *bad_purchases]
    purchase_offsets = produce(settings, topics.purchases, purchase_records)
    pipeline = Enrichment(settings, str(checkpoint), topics)
    query = pipeline.start(spark, {"availableNow": True})
    query.awaitTermination(300)
    assert query.exception() is None, query.exception()

    out = consume_all(settings, topics.output, 1, settings.delivery)
    assert [(r.key, json.loads(r.value or b"")) for r in out] == [
        (b"p-ok", {"id": 1, "name": "Good One", "price": 2.5})
    ]
    dead = consume_all(settings, topics.dlq, 1, settings.delivery)
    expected_errors = {
        # purchases
        b"{bad": "not_json",
        b'{"id":"one","price":1.00}': "wrong_type",
        b'{"price":1.00}': "missing_field",
        None: "null_value",
        b"[1,2]": "not_json",
        b'{"id":1,"price":2.50}\xff': "not_json",
        # referential
        b'{"id":5,"name":"No Key"}': "null_key",
        b'{"id":5,"name":"Bad Key"}': "wrong_type",
        b"not json": "not_json",
        b'{"id":7}': "missing_field",
        b'{"id":8,"name":["a"]}': "wrong_type",
        b'{"id":10,"name":"Mismatch"}': "invalid_value",
        b'{"id":11,"name":"Caf\xe9"}': "not_json",
    }
    letters = by_value(dead)
    assert {v: letters[v].header("error") for v in letters} == expected_errors
    assert letters[b'{"id":7}'].header("error.detail") == "product value has no name (a string)"
    assert (
        letters[b'{"id":11,"name":"Caf\xe9"}'].header("error.detail")
        == "product value is not a JSON object"
    )
    produced_refs = offsets_by_value(ref_records, ref_offsets)
    produced_purchases = offsets_by_value(purchase_records, purchase_offsets)
    for value, letter in letters.items():
        if value in produced_refs:
            check_source(letter, topics.referential, produced_refs)
        else:
            check_source(letter, topics.purchases, produced_purchases)
    assert letters[None].key == b"p-null" and letters[b'{"id":5,"name":"No Key"}'].key is None

    counts = [pipeline.batch_counts(p) for p in query.recentProgress]
    total = {k: sum(c.get(k, 0) for c in counts) for k in {k for c in counts for k in c}}
    assert total["purchases"] == 7 == total["enriched"] + total["purchases_dlq"]
    assert total["referential"] == 8 == total["referential_applied"] + total["referential_dlq"]
    assert (total["enriched"], total["purchases_dlq"], total["referential_dlq"]) == (1, 6, 7)
    assert sum(v for k, v in total.items() if k.startswith("dlq.")) == 13
    # The table holds only the good product, in Spark's state store.
    state = spark.read.format("statestore").load(str(checkpoint)).collect()
    assert [row.key[0] for row in state] == [1]


@pytest.mark.parametrize("delivery", ["at-least-once", "exactly-once"])
def test_game_sessions_dead_letter_each_bad_record_and_keep_going(
    spark: Any, settings: Settings, topic_factory: Any, checkpoint: Path, delivery: str
) -> None:
    settings = settings.model_copy(update={"delivery": delivery})
    topics = GameTopics(
        requests=topic_factory(1, "rq"),
        approvals=topic_factory(1, "rs"),
        output=topic_factory(1, "sessions"),
        dlq=topic_factory(1, "gdlq"),
    )
    hit = codec.encode_hit(codec.Hit(100, "X", "UP", "Direct", "Pro", "NeonBrawl"))
    good_key = codec.header_json(codec.FrameHeader(T0, "100001", "EU"))
    body = codec.body_json(codec.FrameBody("NeonBrawl", (hit,)))
    bad_hit_body = codec.body_json(codec.FrameBody("NeonBrawl", (hit, "FF114101")))

    def header(dt: int, machine: str) -> str:
        return codec.header_json(codec.FrameHeader(T0 + dt, machine, "EU"))

    bad_requests: list[tuple[Any, Any, int, None]] = [
        ("frame " + good_key, body, T0, None),  # key not JSON
        (None, body, T0, None),  # null key
        ('{"ts":"x","machine":"100002","zone":"EU"}', body, T0, None),  # ts of the wrong type
        ('{"ts":1,"zone":"EU"}', body, T0, None),  # no machine
        ('{"ts":1,"machine":"100003","zone":"XX"}', body, T0, None),  # unknown zone
        (header(1, "100004"), body[:10], T0, None),  # truncated body
        (header(2, "100005"), '{"game":"NeonBrawl"}', T0, None),  # no hits
        (header(3, "100006"), '{"game":"NeonBrawl","hits":"2A114101"}', T0, None),  # not a list
        # a good frame but for one undecodable hit (impact 255): dead-lettered, still joined
        (header(4, "100007"), bad_hit_body, T0 + 4, None),
    ]
    # A frame 60 s later, with its approval, moves the watermark past the others.
    far = (header(60_000, "100008"), body, T0 + 60_000, None)
    rq_offsets = produce(
        settings, topics.requests, [(good_key, body, T0, None), *bad_requests, far]
    )
    rs_offsets = produce(
        settings,
        topics.approvals,
        [
            (good_key, body, T0 + 100, None),
            (bad_requests[-1][0], bad_requests[-1][1], T0 + 104, None),
            ("not json", body, T0 + 100, None),
            (far[0], body, T0 + 60_100, None),
        ],
    )
    pipeline = GameSessions(settings, str(checkpoint), topics)
    query = pipeline.start(spark, {"availableNow": True})
    query.awaitTermination(300)
    assert query.exception() is None, query.exception()

    dead = consume_all(settings, topics.dlq, 1, settings.delivery)
    errors = sorted((r.header("source.topic") == topics.requests, r.header("error")) for r in dead)
    assert errors == sorted(
        [
            (True, "not_json"),
            (True, "null_key"),
            (True, "wrong_type"),
            (True, "missing_field"),
            (True, "invalid_value"),
            (True, "not_json"),  # truncated body
            (True, "missing_field"),  # no hits
            (True, "wrong_type"),  # hits a string
            (True, "undecodable_hit"),
            (False, "not_json"),  # approval key
        ]
    )
    for letter in dead:
        offset = int(letter.header("source.offset"))
        if letter.header("source.topic") == topics.requests:
            key, value, _, _ = bad_requests[offset - 1]
            assert rq_offsets[offset] == (0, offset)
        else:
            assert rs_offsets[offset] == (0, offset)
            key, value = "not json", body
        assert letter.key == (key.encode() if key is not None else None)
        assert letter.value == value.encode()
    hit_letter = next(r for r in dead if r.header("error") == "undecodable_hit")
    assert hit_letter.header("error.detail") == "undecodable hit(s): hit 1 FF114101 (impact)"

    total: dict[str, int] = {}
    for progress in query.recentProgress:
        for key, value in pipeline.batch_counts(progress).items():
            total[key] = total.get(key, 0) + value
    assert total["frames_dlq.records"] == 8
    assert total["approvals_dlq.records"] == 1 and total["approvals_dlq.not_json"] == 1
    assert total["hits_dlq.frames"] == 1 and total["hits_dlq.hits"] == 1
    # the good frame, the one with a bad hit and the far one: approved as soon as paired
    assert total["join.approved"] == 3
