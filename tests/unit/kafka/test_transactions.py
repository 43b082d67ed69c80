"""Exactly-once output's pure parts: transactional ids, marker partition and codec, the skip
rule, the sink's delivery options and the settings that refuse what cannot be exact."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from streamscale.errors import ConfigError
from streamscale.kafka import transactions as tx
from streamscale.kafka.exactly_once import ExactlyOnceWriter
from streamscale.kafka.options import OptionError, parse_delivery, parse_sink
from streamscale.settings import Settings, SettingsError


@pytest.mark.parametrize(
    ("unit", "tid"),
    [
        (tx.Unit("q1", "tasks", 3), "streamscale-q1-tasks-3"),
        (tx.Unit("q1", "driver", tx.DRIVER_PARTITION), "streamscale-q1-driver-driver"),
        (tx.Unit("q2", "sessions", 0), "streamscale-q2-sessions-0"),
    ],
)
def test_transactional_ids_are_stable_per_query_role_and_partition(unit: tx.Unit, tid: str) -> None:
    assert unit.transactional_id == tid
    assert tx.Unit(unit.query_id, unit.role, unit.partition).transactional_id == tid


@given(st.text(min_size=1, max_size=60), st.integers(1, 64))
def test_marker_partition_is_stable_and_in_range(tid: str, partitions: int) -> None:
    p = tx.marker_partition(tid, partitions)
    assert 0 <= p < partitions
    assert p == tx.marker_partition(tid, partitions)


@given(st.integers(0, 2**40))
def test_marker_round_trip(batch: int) -> None:
    assert tx.marker_batch(tx.marker_value(batch)) == batch


@pytest.mark.parametrize("value", [None, b"", b"not json", b"[1]", b'{"batch": "x"}'])
def test_foreign_marker_values_mean_no_batch(value: bytes | None) -> None:
    assert tx.marker_batch(value) is None


@pytest.mark.parametrize(
    ("batch", "committed", "skip"),
    [(0, None, False), (5, 4, False), (5, 5, True), (4, 5, True), (6, 5, False)],
)
def test_a_batch_is_skipped_once_its_unit_committed_it(
    batch: int, committed: int | None, skip: bool
) -> None:
    assert tx.already_committed(batch, committed) is skip


def test_sink_options_select_the_delivery() -> None:
    conn = {"kafka.bootstrap.servers": "h:1", "topic": "t"}
    assert parse_sink(conn, ["value"]).delivery == "at-least-once"
    options = parse_sink(
        {**conn, "delivery": "Exactly-Once", "transactionalRole": "dlq", "markerTopic": "m"},
        ["value"],
    )
    assert (options.delivery, options.role, options.marker_topic) == ("exactly-once", "dlq", "m")
    with pytest.raises(OptionError, match="delivery must be"):
        parse_sink({**conn, "delivery": "twice"}, ["value"])
    with pytest.raises(OptionError, match="transactionalRole"):
        parse_sink({**conn, "transactionalRole": "a b"}, ["value"])


def test_settings_delivery_and_what_it_refuses() -> None:
    assert Settings().delivery == "at-least-once"
    s = Settings(delivery="exactly-once")
    assert s.sink_options("tasks")["delivery"] == "exactly-once"
    assert s.sink_options("tasks")["transactionalRole"] == "tasks"
    with pytest.raises(SettingsError, match="min_partitions"):
        Settings(delivery="exactly-once", min_partitions=8)
    with pytest.raises(SettingsError, match="delivery"):
        Settings(delivery="twice")  # type: ignore[arg-type]


def test_the_writer_refuses_min_partitions_in_one_line() -> None:
    with pytest.raises(tx.NotExactError, match="minPartitions") as caught:
        ExactlyOnceWriter({"kafka.bootstrap.servers": "h:1"}, source_options={"minPartitions": "4"})
    assert "\n" not in str(caught.value)
    assert isinstance(caught.value, ConfigError)


def test_parse_delivery() -> None:
    assert parse_delivery(None) == "at-least-once"
    assert parse_delivery("exactly-once") == "exactly-once"
    with pytest.raises(ConfigError):
        parse_delivery("x")


@pytest.mark.parametrize(
    ("pairs", "unit"),
    [
        ([("achats", 2)], "achats-2"),
        ([("achats", 2), ("achats", 2)], "achats-2"),
        ([("RQ", 1), ("RS", 1)], "p1"),
    ],
)
def test_a_task_reading_kafka_is_named_by_what_it_read(
    pairs: list[tuple[str, int]], unit: str
) -> None:
    assert tx.input_unit(pairs) == unit
    assert tx.input_unit(reversed(pairs)) == unit  # whatever the order


@given(st.sets(st.tuples(st.sampled_from(["a", "b", "c"]), st.integers(0, 5)), min_size=1))
def test_input_units_are_order_free_and_tell_sets_apart(pairs: set[tuple[str, int]]) -> None:
    ordered = sorted(pairs)
    assert tx.input_unit(ordered) == tx.input_unit(reversed(ordered))
    other = pairs | {("z", 9)}
    assert tx.input_unit(other) != tx.input_unit(pairs)


def test_arrow_input_pairs() -> None:
    import pyarrow as pa

    batch = pa.RecordBatch.from_pydict(
        {"topic": ["a", "a", "b"], "partition": pa.array([1, 1, 1], pa.int32())}
    )
    assert tx.arrow_input_pairs(batch) == {("a", 1), ("b", 1)}


def test_the_data_source_sink_refuses_exactly_once_in_one_line() -> None:
    from pyspark.sql.types import BinaryType, StructField, StructType

    from streamscale.kafka.datasource import KafkaDataSource

    source = KafkaDataSource(
        {"kafka.bootstrap.servers": "h:1", "topic": "t", "delivery": "exactly-once"}
    )
    schema = StructType([StructField("value", BinaryType())])
    with pytest.raises(tx.NotExactError, match="ExactlyOnceWriter") as caught:
        source.streamWriter(schema, False)
    assert "\n" not in str(caught.value)
