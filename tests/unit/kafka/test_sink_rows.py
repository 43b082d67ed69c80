"""How the sink hands Arrow rows to a producer: topics, order, headers, partitions, back-off."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from streamscale.kafka.sink import produce_rows

HEADERS = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))


class Recorder:
    """A producer stand-in that records calls and can refuse the first N with BufferError."""

    def __init__(self, refuse: int = 0) -> None:
        self.records: list[tuple[str, bytes | None, bytes | None, dict[str, Any]]] = []
        self.refuse = refuse
        self.polls = 0

    def produce(self, topic: str, value: Any, key: Any = None, **kwargs: Any) -> None:
        if self.refuse:
            self.refuse -= 1
            raise BufferError("queue full")
        self.records.append((topic, value, key, kwargs))

    def poll(self, timeout: float) -> int:
        self.polls += 1
        return 0


def test_key_value_to_the_default_topic_in_order() -> None:
    batch = pa.RecordBatch.from_pydict(
        {"key": [b"a", None, b"c"], "value": ["x", "y", "z"]},
        schema=pa.schema([("key", pa.binary()), ("value", pa.string())]),
    )
    producer = Recorder()
    assert produce_rows(producer, batch, "out", []) == 3
    assert producer.records == [
        ("out", b"x", b"a", {}),
        ("out", b"y", None, {}),
        ("out", b"z", b"c", {}),
    ]


def test_topic_column_headers_and_partition() -> None:
    batch = pa.RecordBatch.from_pydict(
        {
            "key": [b"1", b"2", b"3", b"4"],
            "value": [b"ok1", b"bad", b"ok2", b"ok3"],
            "topic": ["out", "dlq", None, "out"],
            "headers": [None, [{"key": "error", "value": b"not-json"}], [], None],
            "partition": [None, None, None, 2],
        },
        schema=pa.schema(
            [
                ("key", pa.binary()),
                ("value", pa.binary()),
                ("topic", pa.string()),
                ("headers", HEADERS),
                ("partition", pa.int32()),
            ]
        ),
    )
    producer = Recorder()
    assert produce_rows(producer, batch, "out", []) == 4
    by_topic: dict[str, list[Any]] = {}
    for topic, value, key, kwargs in producer.records:
        by_topic.setdefault(topic, []).append((value, key, kwargs))
    assert by_topic == {
        "out": [(b"ok1", b"1", {}), (b"ok2", b"3", {}), (b"ok3", b"4", {"partition": 2})],
        "dlq": [(b"bad", b"2", {"headers": [("error", b"not-json")]})],
    }


def test_null_topic_without_default_is_an_error() -> None:
    batch = pa.RecordBatch.from_pydict({"value": [b"v"], "topic": pa.array([None], pa.string())})
    with pytest.raises(ValueError, match="null topic"):
        produce_rows(Recorder(), batch, None, [])


def test_full_queue_waits_and_loses_nothing() -> None:
    batch = pa.RecordBatch.from_pydict({"value": [b"%d" % i for i in range(10)]})
    producer = Recorder(refuse=3)
    produce_rows(producer, batch, "out", [])
    assert [r[1] for r in producer.records] == [b"%d" % i for i in range(10)]
    assert producer.polls >= 3


def test_stops_early_once_a_delivery_failed() -> None:
    batch = pa.RecordBatch.from_pydict({"value": [b"v"] * 12_000})
    producer = Recorder()
    produce_rows(producer, batch, "out", ["out[0]: broker down"])
    assert len(producer.records) == 5000


@given(
    st.lists(
        st.tuples(st.sampled_from(["a", "b"]), st.booleans(), st.binary(max_size=4)),
        max_size=40,
    )
)
def test_per_topic_order_is_kept_whatever_the_mix(rows: list[tuple[str, bool, bytes]]) -> None:
    batch = pa.RecordBatch.from_pydict(
        {
            "value": [v for _, _, v in rows],
            "topic": [t for t, _, _ in rows],
            "headers": [[{"key": "h", "value": b""}] if h else None for _, h, _ in rows],
        },
        schema=pa.schema([("value", pa.binary()), ("topic", pa.string()), ("headers", HEADERS)]),
    )
    producer = Recorder()
    produce_rows(producer, batch, None, [])
    for topic in ("a", "b"):
        sent = [(r[1], "headers" in r[3]) for r in producer.records if r[0] == topic]
        assert sent == [(v, h) for t, h, v in rows if t == topic]


def test_a_worker_keeps_its_producer_until_a_write_fails() -> None:
    """No broker is needed (nothing is sent); the producers kept are dropped at the end, or
    they would retry their unreachable bootstrap for the rest of the test process."""
    from streamscale.kafka import sink
    from streamscale.kafka.sink import reused_producer

    conn = {"bootstrap.servers": "127.0.0.1:1"}
    try:
        with reused_producer(conn) as (first, failures):
            assert failures == []
        with reused_producer(conn) as (again, failures):
            assert again is first  # kept for the next task
            with reused_producer(conn) as (concurrent, _):
                assert concurrent is not first  # in use: a concurrent write makes its own
            failures.append("t[0]: a failed delivery")
        with reused_producer(conn) as (after_failure, failures):
            assert after_failure is concurrent and failures == []  # the failed one was dropped
        with reused_producer({**conn, "client.id": "other"}) as (other, _):
            assert other is not after_failure  # another connection, another producer
    finally:
        sink._kept.clear()


class _FakeProducer:
    def __init__(self) -> None:
        self.calls: list[str] = []

    def flush(self, timeout: float) -> int:
        self.calls.append("flush")
        return 0

    def close(self) -> None:
        self.calls.append("close")


def test_kept_producers_are_flushed_then_closed_and_forgotten(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A producer the sink keeps for the next write must not outlive the session (it would
    retry a stopped broker and log every failed connect)."""
    from streamscale.kafka import sink

    fakes = [_FakeProducer(), _FakeProducer()]
    kept = {(("bootstrap.servers", f"h:{i}"),): sink._Kept(producer=p) for i, p in enumerate(fakes)}
    monkeypatch.setattr(sink, "_kept", kept)
    assert sink.close_kept_producers() == 2
    assert [p.calls for p in fakes] == [["flush", "close"], ["flush", "close"]]
    assert sink._kept == {}
    assert sink.close_kept_producers() == 0
