"""The source's Arrow conversion and the collector policy, on constructed messages."""

from __future__ import annotations

import gc
from datetime import UTC, datetime

import pyarrow as pa
import pytest
from confluent_kafka import Message
from hypothesis import given
from hypothesis import strategies as st

from streamscale.kafka.collector import collector_paused
from streamscale.kafka.source import arrow_batch, source_schema


def message(offset: int, key: bytes | None, value: bytes | None, ts: tuple[int, int]) -> Message:
    return Message(topic="t", partition=3, offset=offset, key=key, value=value, timestamp=ts)


def test_columns_follow_spark_kafka_schema() -> None:
    msgs = [
        message(7, b"k", b"v", (1, 1_700_000_000_123)),
        message(8, None, None, (2, 1_700_000_000_456)),
        message(9, b"", b"x", (0, -1)),
    ]
    batch = arrow_batch(msgs, "t", 3, include_headers=False)
    assert batch.schema.names == source_schema().names
    assert batch.column(0).to_pylist() == [b"k", None, b""]
    assert batch.column(1).to_pylist() == [b"v", None, b"x"]
    assert batch.column(2).to_pylist() == ["t", "t", "t"]
    assert batch.column(3).type == pa.int32() and batch.column(3).to_pylist() == [3, 3, 3]
    assert batch.column(4).to_pylist() == [7, 8, 9]
    assert batch.column(5).type == pa.timestamp("us", tz="UTC")
    assert batch.column(5)[0].as_py() == datetime(2023, 11, 14, 22, 13, 20, 123000, tzinfo=UTC)
    # librdkafka's create / log-append / not-available → Kafka's 0 / 1 / -1.
    assert batch.column(6).to_pylist() == [0, 1, -1]


def test_headers_column() -> None:
    msg = Message(topic="t", partition=0, offset=1, value=b"v", headers=[("a", b"1"), ("b", None)])
    batch = arrow_batch([msg, message(2, None, b"w", (1, 5))], "t", 0, include_headers=True)
    assert batch.schema.names[-1] == "headers"
    assert batch.column(7).to_pylist() == [
        [{"key": "a", "value": b"1"}, {"key": "b", "value": None}],
        None,  # no headers: null, as Spark's connector gives
    ]


@given(
    st.lists(
        st.tuples(
            st.one_of(st.none(), st.binary(max_size=20)),
            st.binary(max_size=50),
            st.integers(min_value=0, max_value=2**41),
        ),
        min_size=1,
        max_size=50,
    )
)
def test_every_record_kept_in_order(records: list[tuple[bytes | None, bytes, int]]) -> None:
    msgs = [message(i, k, v, (1, ts)) for i, (k, v, ts) in enumerate(records)]
    batch = arrow_batch(msgs, "t", 3, include_headers=False)
    assert batch.num_rows == len(records)
    assert batch.column(0).to_pylist() == [k for k, _, _ in records]
    assert batch.column(1).to_pylist() == [v for _, v, _ in records]
    micros = batch.column(5).cast(pa.int64()).to_pylist()
    assert micros == [ts * 1000 for _, _, ts in records]


def test_collector_paused_and_restored() -> None:
    assert gc.isenabled()
    with collector_paused():
        assert not gc.isenabled()
    assert gc.isenabled()
    with pytest.raises(ValueError), collector_paused():
        raise ValueError
    assert gc.isenabled()


def test_collector_state_kept_when_already_off() -> None:
    gc.disable()
    try:
        with collector_paused():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()
