"""Bad input, fuzzed (issue 13, item 3): Hypothesis generates malformed records for every input
topic of both seed pipelines (truncated and invalid JSON, wrong types, missing fields, huge
values, bad hit encodings, null keys and values, tombstones where none belong); each one must
reach the pipeline's dead-letter topic exactly once with a reason and its source position,
the pipeline keeps running (a good record after them still comes out), and the counts
reconcile: input = output + dead letters."""

from __future__ import annotations

import json
import os
import uuid
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, example, given, settings
from hypothesis import strategies as st
from scenarios import read_topic, send_exact

from streamscale.experiment.verify import reconcile
from streamscale.kafka.admin import KafkaAdmin, TopicSpec
from streamscale.pipelines import deadletter as dl
from streamscale.pipelines import hits as codec
from streamscale.pipelines.enrichment import Enrichment, EnrichmentTopics
from streamscale.pipelines.game_sessions import GameSessions, GameTopics
from streamscale.settings import Settings

pytestmark = [pytest.mark.integration, pytest.mark.faults]

T0 = 1_767_225_600_000
HUGE = 300_000
"""Characters of a huge value (under the broker's 1 MB record limit)."""
FUZZ = settings(
    # Each example is a Spark run: one generated (after the explicit one of every kind) in the
    # default suite; FAULTS_FUZZ_EXAMPLES=50 for a long run.
    max_examples=int(os.environ.get("FAULTS_FUZZ_EXAMPLES", "1")),
    deadline=None,
    suppress_health_check=list(HealthCheck),
    phases=[Phase.explicit, Phase.reuse, Phase.generate],  # no shrinking: a Spark run each
    print_blob=True,
)

Raw = tuple[str | bytes | None, str | bytes | None]
"""A record's key and value, text (bytes where they are not UTF-8) or null."""


# --- malformed pieces ------------------------------------------------------------------------

json_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**80), 2**80),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=8),
)
not_json = st.one_of(
    st.text(max_size=30).filter(lambda t: not _parses_to_object(t)),
    st.sampled_from(["{", "{bad", '{"id":', "[1,2]", "1", '"x"', "null", "", "{}}", "\x00"]),
)
huge_number = st.integers(50, HUGE // 1000).map(lambda n: "9" * (n * 1000))
huge_text = st.just("x" * HUGE)


def _parses_to_object(text: str) -> bool:
    try:
        return isinstance(json.loads(text), dict)
    except ValueError:
        return False


NOT_UTF8_BYTES = bytes([*range(0x80, 0xC2), *range(0xF5, 0x100)])
"""Bytes that are never valid UTF-8 where an ASCII character could be."""


def spoiled(valid: st.SearchStrategy[str]) -> st.SearchStrategy[bytes]:
    """An ASCII JSON text with a byte that is not UTF-8 put in anywhere: inside a string (a
    Latin-1 name), between tokens or at the end. Not JSON (RFC 8259), though a lenient
    decoder reads it as U+FFFD and parses the rest."""

    def put_in(text: str, at: int, byte: int) -> bytes:
        raw = text.encode()
        cut = at % (len(raw) + 1)
        return raw[:cut] + bytes([byte]) + raw[cut:]

    return st.builds(put_in, valid, st.integers(0, 10**6), st.sampled_from(NOT_UTF8_BYTES))


def truncated(valid: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    """A valid JSON object cut short (never a whole object again)."""
    return valid.flatmap(lambda text: st.integers(0, len(text) - 1).map(lambda n: text[:n])).filter(
        lambda t: not _parses_to_object(t)
    )


def wrong_type(fields: dict[str, Any], kinds: dict[str, st.SearchStrategy[Any]]) -> Any:
    """A valid object with one field given a value of another JSON type."""
    name = st.sampled_from(sorted(kinds))
    return name.flatmap(lambda f: kinds[f].map(lambda bad: json.dumps({**fields, f: bad})))


def missing(fields: dict[str, Any]) -> Any:
    names = st.sets(st.sampled_from(sorted(fields)), min_size=1)
    return names.map(lambda drop: json.dumps({k: v for k, v in fields.items() if k not in drop}))


# --- purchases and the referential ----------------------------------------------------------

PURCHASE = {"id": 7, "price": 12.5}
not_int = st.one_of(
    st.text(max_size=5),
    st.booleans(),
    st.floats(allow_nan=False, allow_infinity=False).filter(lambda f: f != int(f)),
    st.integers(2**63, 2**80),
    st.lists(st.integers(), max_size=2),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=1),
)
not_price = st.one_of(
    st.text(max_size=5),
    st.booleans(),
    st.just(1e9),
    st.integers(10**8, 10**20),
    st.lists(st.integers(), max_size=2),
)
purchase_key = st.uuids().map(str)
bad_purchase_value: st.SearchStrategy[str | bytes] = st.one_of(
    not_json,
    truncated(st.just(json.dumps(PURCHASE))),
    wrong_type(PURCHASE, {"id": not_int, "price": not_price}),
    missing(PURCHASE),
    huge_number.map(lambda n: f'{{"id":{n},"price":1.00}}'),
    huge_text.map(lambda t: f'{{"id":1,"price":"{t}"}}'),
    spoiled(st.just(json.dumps(PURCHASE))),
)
bad_purchase: st.SearchStrategy[Raw] = st.one_of(
    st.tuples(purchase_key, bad_purchase_value),
    st.tuples(purchase_key, st.none()),  # a tombstone where none belongs
    st.tuples(st.none(), st.just('{"id":7,"price":1.00}')),  # no transaction id
)

PRODUCT = {"id": 5, "name": "Widget"}
bad_product: st.SearchStrategy[Raw] = st.one_of(
    st.tuples(st.none(), st.just(json.dumps(PRODUCT))),  # null key
    st.tuples(st.none(), st.none()),  # a tombstone without a key
    st.tuples(st.from_regex(r"[a-z]{1,6}", fullmatch=True), st.just(json.dumps(PRODUCT))),
    st.tuples(st.just("5"), not_json),
    st.tuples(st.just("5"), truncated(st.just(json.dumps(PRODUCT)))),
    st.tuples(
        st.just("5"),
        wrong_type(PRODUCT, {"id": not_int, "name": st.one_of(st.integers(), st.booleans())}),
    ),
    st.tuples(st.just("5"), missing(PRODUCT)),
    st.tuples(st.integers(6, 10**6).map(str), st.just(json.dumps(PRODUCT))),  # id ≠ key
    st.tuples(st.just("5"), huge_number.map(lambda n: f'{{"id":{n},"name":"W"}}')),
    st.tuples(st.just("5"), spoiled(st.just(json.dumps(PRODUCT)))),
)


# --- game frames and approvals ---------------------------------------------------------------

GOOD_HIT = codec.encode_hit(codec.Hit(100, "X", "UP", "Direct", "Pro", "NeonBrawl"))
HEADER = {"ts": T0, "machine": "100001", "zone": "EU"}
BODY = {"game": "NeonBrawl", "hits": [GOOD_HIT]}
headers = st.builds(
    lambda dt, m: codec.header_json(codec.FrameHeader(T0 + dt, f"{m:06d}", "EU")),
    st.integers(0, 10_000),
    st.integers(100_000, 999_999),
)
bad_header: st.SearchStrategy[str | bytes] = st.one_of(
    not_json,
    truncated(st.just(json.dumps(HEADER))),
    wrong_type(
        HEADER,
        {
            "ts": st.one_of(st.text(max_size=4), st.booleans(), st.integers(2**63, 2**70)),
            "machine": st.one_of(st.integers(), st.booleans(), st.lists(st.integers())),
            "zone": st.one_of(st.integers(), st.booleans()),
        },
    ),
    missing(HEADER),
    st.sampled_from(
        [
            json.dumps({**HEADER, "zone": "XX"}),
            json.dumps({**HEADER, "machine": "12345"}),
            json.dumps({**HEADER, "machine": "abcdef"}),
            json.dumps({**HEADER, "ts": -1}),
        ]
    ),
    huge_text.map(lambda t: json.dumps({**HEADER, "machine": t})),
    spoiled(headers),
)
bad_hit = st.one_of(
    st.text(max_size=12).filter(lambda t: len(t) != 8),
    st.from_regex(r"[G-Zg-z]{8}", fullmatch=True),
    st.sampled_from(["00114101", "FF114101", "2A014101", "2A904101", "2A11F101", "2A114199"]),
    st.integers(),
)
bad_body: st.SearchStrategy[str | bytes] = st.one_of(
    not_json,
    truncated(st.just(json.dumps(BODY))),
    wrong_type(BODY, {"game": st.integers(), "hits": st.one_of(st.text(max_size=8), json_scalars)}),
    missing(BODY),
    st.sampled_from(
        [
            json.dumps({"game": "NoSuchGame", "hits": [GOOD_HIT]}),
            json.dumps({"game": "NeonBrawl", "hits": []}),
            json.dumps({"game": "NeonBrawl", "hits": [GOOD_HIT] * 6}),
        ]
    ),
    huge_text.map(lambda t: json.dumps({"game": t, "hits": [GOOD_HIT]})),
    spoiled(st.just(json.dumps(BODY))),
)
body_with_bad_hits = st.tuples(
    st.lists(bad_hit, min_size=1, max_size=3), st.lists(st.just(GOOD_HIT), max_size=2)
).map(lambda parts: json.dumps({"game": "NeonBrawl", "hits": (parts[0] + parts[1])[:5]}))
bad_frame: st.SearchStrategy[Raw] = st.one_of(
    st.tuples(st.none(), st.just(json.dumps(BODY))),  # null key
    st.tuples(bad_header, st.just(json.dumps(BODY))),
    st.tuples(headers, bad_body),
    st.tuples(headers, st.none()),  # a tombstone where none belongs
    st.tuples(headers, body_with_bad_hits),
)
bad_approval: st.SearchStrategy[Raw] = st.one_of(
    st.tuples(st.none(), st.just(json.dumps(BODY))),
    st.tuples(bad_header, st.just(json.dumps(BODY))),
    st.tuples(headers, st.none()),  # a tombstone where none belongs
)


# --- running and checking ----------------------------------------------------------------------


def new_topics(settings: Settings, *roles: str) -> dict[str, str]:
    names = {role: f"fz-{role}-{uuid.uuid4().hex[:8]}" for role in roles}
    admin = KafkaAdmin(settings.kafka_config(), timeout_s=15)
    try:
        admin.apply(
            TopicSpec(n, 2, replication_factor=1, configs={"retention.ms": "-1"})
            for n in names.values()
        )
    finally:
        admin.close()
    return names


def send(settings: Settings, topic: str, records: list[Raw], ts: int = T0) -> list[tuple[int, int]]:
    """Produce in order, spread over both partitions; the (partition, offset) of each."""
    rows = [(k, v, ts, i % 2) for i, (k, v) in enumerate(records)]
    return send_exact(settings.bootstrap_servers, topic, rows)


def _headers(msg: Any) -> dict[str, str]:
    return {k: v.decode() for k, v in msg.headers() or []}


def check_letters(
    settings: Settings, dlq: str, sent: dict[str, list[tuple[int, int]]]
) -> dict[str, int]:
    """Every sent record is dead-lettered exactly once with a reason and its position; the
    errors counted by code."""
    letters = [_headers(m) for m in read_topic(settings.bootstrap_servers, dlq)]
    where = [
        (
            r[dl.HEADER_TOPIC],
            int(r[dl.HEADER_PARTITION]),
            int(r[dl.HEADER_OFFSET]),
        )
        for r in letters
    ]
    wanted = [(topic, p, o) for topic, positions in sent.items() for p, o in positions]
    result = reconcile(wanted, [], where)  # type: ignore[arg-type]
    assert result.lost == 0, (
        f"{result.lost} malformed records not dead-lettered: {result.lost_keys}"
    )
    assert result.duplicated == 0 and result.unexpected == 0, result
    codes: dict[str, int] = {}
    for r in letters:
        assert r[dl.HEADER_ERROR] in dl.ERRORS
        assert r[dl.HEADER_DETAIL]
        codes[r[dl.HEADER_ERROR]] = codes.get(r[dl.HEADER_ERROR], 0) + 1
    return codes


EVERY_KIND_OF_PURCHASE: list[Raw] = [
    ("k-trunc", '{"id":7,"pri'),
    ("k-text", "not json"),
    ("k-array", "[1,2]"),
    ("k-id-str", '{"id":"7","price":1.00}'),
    ("k-id-float", '{"id":7.5,"price":1.00}'),
    ("k-price-bool", '{"id":7,"price":true}'),
    ("k-price-big", '{"id":7,"price":1000000000}'),
    ("k-missing", '{"id":7}'),
    ("k-huge-id", '{"id":' + "9" * HUGE + ',"price":1.00}'),
    ("k-huge-price", '{"id":7,"price":"' + "x" * HUGE + '"}'),
    ("k-tombstone", None),
    (None, '{"id":7,"price":1.00}'),
    ("k-latin1", b'{"id":7,"price":1.00,"note":"caf\xe9"}'),
    ("k-after", b'{"id":7,"price":1.00}\xff'),
]
EVERY_KIND_OF_PRODUCT: list[Raw] = [
    (None, json.dumps(PRODUCT)),
    (None, None),
    ("abc", json.dumps(PRODUCT)),
    ("5", '{"id":5,"na'),
    ("5", '{"id":"5","name":"W"}'),
    ("5", '{"id":5,"name":7}'),
    ("5", '{"id":5}'),
    ("6", json.dumps(PRODUCT)),
    ("5", '{"id":' + "9" * HUGE + ',"name":"W"}'),
    ("5", b'{"id":5,"name":"Caf\xe9"}'),
]


@FUZZ
@given(
    purchases=st.lists(bad_purchase, min_size=20, max_size=40),
    products=st.lists(bad_product, min_size=10, max_size=20),
)
@example(purchases=EVERY_KIND_OF_PURCHASE, products=EVERY_KIND_OF_PRODUCT)
def test_enrichment_dead_letters_every_malformed_record(
    spark: Any,
    settings: Settings,
    tmp_path_factory: pytest.TempPathFactory,
    purchases: list[Raw],
    products: list[Raw],
) -> None:
    names = new_topics(settings, "achats", "referentiel", "enrichis", "dlq")
    topics = EnrichmentTopics(
        names["achats"], names["referentiel"], names["enrichis"], names["dlq"]
    )
    sent_refs = send(settings, topics.referential, [*products, ("1", '{"id":1,"name":"Good"}')])
    good = ("good-purchase", '{"id":1,"price":2.50}')
    sent = send(settings, topics.purchases, [*purchases, good], ts=T0 + 1)
    fast = Settings(bootstrap_servers=settings.bootstrap_servers, max_offsets_per_trigger=4)
    pipeline = Enrichment(fast, str(tmp_path_factory.mktemp("ckpt")), topics)
    query = pipeline.start(spark, {"availableNow": True})
    query.awaitTermination(300)
    assert query.exception() is None, query.exception()

    codes = check_letters(
        settings, topics.dlq, {topics.purchases: sent[:-1], topics.referential: sent_refs[:-1]}
    )
    out = read_topic(settings.bootstrap_servers, topics.output)
    assert [(m.key(), json.loads(m.value() or b"")) for m in out] == [
        (b"good-purchase", {"id": 1, "name": "Good", "price": 2.5})
    ]
    total: dict[str, int] = {}
    for progress in query.recentProgress:
        for k, v in pipeline.batch_counts(progress).items():
            total[k] = total.get(k, 0) + v
    assert total["purchases"] == len(purchases) + 1 == total["enriched"] + total["purchases_dlq"]
    assert total["purchases_dlq"] == len(purchases)
    assert total["referential_dlq"] == len(products) and total["referential_applied"] == 1
    assert len(pipeline.counts) > 1  # several micro-batches: it kept running after bad ones
    print(f"\nenrichment fuzz: {len(purchases)} purchases, {len(products)} products -> {codes}")


_H = codec.header_json(codec.FrameHeader(T0, "100001", "EU"))
EVERY_KIND_OF_FRAME: list[Raw] = [
    (None, json.dumps(BODY)),
    ("not json", json.dumps(BODY)),
    (_H[:10], json.dumps(BODY)),
    ('{"ts":"x","machine":"100001","zone":"EU"}', json.dumps(BODY)),
    ('{"ts":1,"zone":"EU"}', json.dumps(BODY)),
    ('{"ts":1,"machine":"100001","zone":"XX"}', json.dumps(BODY)),
    ('{"ts":1,"machine":"' + "1" * HUGE + '","zone":"EU"}', json.dumps(BODY)),
    (_H, json.dumps(BODY)[:12]),
    (_H, "[]"),
    (_H, '{"game":7,"hits":[]}'),
    (_H, '{"game":"NeonBrawl"}'),
    (_H, json.dumps({"game": "NoSuchGame", "hits": [GOOD_HIT]})),
    (_H, json.dumps({"game": "x" * HUGE, "hits": [GOOD_HIT]})),
    (_H, None),
    (_H, json.dumps({"game": "NeonBrawl", "hits": ["FF114101", "2A0", 7, GOOD_HIT]})),
    (_H.encode()[:-2] + b'\xff"}', json.dumps(BODY)),
    (_H, b'{"game":"NeonBrawl\xe9","hits":["' + GOOD_HIT.encode() + b'"]}'),
]
EVERY_KIND_OF_APPROVAL: list[Raw] = [
    (None, json.dumps(BODY)),
    ("{", json.dumps(BODY)),
    ('{"ts":1,"machine":100001,"zone":"EU"}', json.dumps(BODY)),
    (_H, None),
    (b"\xfe" + _H.encode(), json.dumps(BODY)),
]


@FUZZ
@given(
    frames=st.lists(bad_frame, min_size=20, max_size=40),
    approvals=st.lists(bad_approval, min_size=10, max_size=20),
)
@example(frames=EVERY_KIND_OF_FRAME, approvals=EVERY_KIND_OF_APPROVAL)
def test_game_sessions_dead_letter_every_malformed_record(
    spark: Any,
    settings: Settings,
    tmp_path_factory: pytest.TempPathFactory,
    frames: list[Raw],
    approvals: list[Raw],
) -> None:
    names = new_topics(settings, "rq", "rs", "sessions", "gdlq")
    topics = GameTopics(names["rq"], names["rs"], names["sessions"], names["gdlq"])
    sent_rq = send(settings, topics.requests, frames)
    sent_rs = send(settings, topics.approvals, approvals, ts=T0 + 100)
    fast = Settings(bootstrap_servers=settings.bootstrap_servers, max_offsets_per_trigger=4)
    pipeline = GameSessions(fast, str(tmp_path_factory.mktemp("ckpt")), topics)
    query = pipeline.start(spark, {"availableNow": True})
    query.awaitTermination(300)
    assert query.exception() is None, query.exception()

    codes = check_letters(
        settings, topics.dlq, {topics.requests: sent_rq, topics.approvals: sent_rs}
    )
    total: dict[str, int] = {}
    for progress in query.recentProgress:
        for k, v in pipeline.batch_counts(progress).items():
            total[k] = total.get(k, 0) + v
    bad_hits = codes.get(dl.UNDECODABLE_HIT, 0)
    assert total.get("frames_dlq.records", 0) + bad_hits == len(frames)
    assert total.get("hits_dlq.frames", 0) == bad_hits
    assert total.get("approvals_dlq.records", 0) == len(approvals)
    assert total.get("join.approved", 0) == 0
    assert len([p for p in query.recentProgress if p.numInputRows]) > 1
    print(f"\ngame-sessions fuzz: {len(frames)} frames, {len(approvals)} approvals -> {codes}")
