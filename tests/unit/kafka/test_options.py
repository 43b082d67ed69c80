"""Option parsing of the source and sink: names as Spark's, errors that say what to change."""

from __future__ import annotations

import pytest

from streamscale.kafka.offsets import TopicPartition
from streamscale.kafka.options import OptionError, parse_sink, parse_source

BASE = {"kafka.bootstrap.servers": "127.0.0.1:9092"}


def test_subscribe_defaults() -> None:
    opts = parse_source({**BASE, "subscribe": "a, b"})
    assert opts.subscribe == ("a", "b")
    assert opts.starting == "latest"
    assert opts.fail_on_data_loss is True
    assert opts.max_offsets_per_trigger is None
    assert opts.kafka == {"bootstrap.servers": "127.0.0.1:9092"}
    assert opts.group_id.startswith("streamscale-")


def test_options_are_case_insensitive_as_in_spark() -> None:
    opts = parse_source(
        {
            **BASE,
            "subscribepattern": "a.*",
            "STARTINGOFFSETS": "earliest",
            "maxoffsetspertrigger": "10",
            "minpartitions": "4",
            "failondataloss": "false",
            "includeheaders": "true",
        }
    )
    assert opts.subscribe_pattern == "a.*"
    assert opts.starting == "earliest"
    assert (opts.max_offsets_per_trigger, opts.min_partitions) == (10, 4)
    assert opts.fail_on_data_loss is False
    assert opts.include_headers is True


def test_assign_and_json_starting_offsets() -> None:
    opts = parse_source(
        {**BASE, "assign": '{"t": [1, 0]}', "startingOffsets": '{"t": {"0": -2, "1": 5}}'}
    )
    assert opts.assign == (TopicPartition("t", 0), TopicPartition("t", 1))
    assert opts.starting == {TopicPartition("t", 0): -2, TopicPartition("t", 1): 5}


def test_group_id_naming() -> None:
    assert parse_source({**BASE, "subscribe": "a", "queryName": "q1"}).group_id == "streamscale-q1"
    named = parse_source({**BASE, "subscribe": "a", "queryName": "q1", "groupIdPrefix": "app"})
    assert named.group_id == "app-q1"
    exact = parse_source({**BASE, "subscribe": "a", "kafka.group.id": "mine"})
    assert exact.group_id == "mine"
    assert "group.id" not in exact.kafka


@pytest.mark.parametrize(
    ("value", "expected"),
    [(None, False), ("true", True), ("TRUE", True), ("1", True), ("no", False)],
)
def test_co_partitioned_option(value: str | None, expected: bool) -> None:
    """``coPartitioned`` (ours): off by default, a boolean like Spark's options."""
    options = {**BASE, "subscribe": "rq,rs"}
    if value is not None:
        options["coPartitioned"] = value
    assert parse_source(options).co_partitioned is expected
    assert parse_source({**BASE, "subscribe": "a", "copartitioned": "yes"}).co_partitioned


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"subscribe": "a"}, "kafka.bootstrap.servers is required"),
        (BASE, "exactly one of subscribe, subscribePattern or assign"),
        ({**BASE, "subscribe": "a", "assign": '{"a": [0]}'}, "(given: subscribe, assign)"),
        ({**BASE, "subscribe": " , "}, "subscribe names no topic"),
        ({**BASE, "subscribePattern": "("}, "not a valid regex"),
        ({**BASE, "assign": "[0]"}, "option assign"),
        ({**BASE, "subscribe": "a", "startingOffsets": "first"}, "startingOffsets must be"),
        ({**BASE, "subscribe": "a", "maxOffsetsPerTrigger": "0"}, "positive integer"),
        ({**BASE, "subscribe": "a", "minPartitions": "x"}, "positive integer"),
        ({**BASE, "subscribe": "a", "failOnDataLoss": "maybe"}, "true or false"),
        ({**BASE, "subscribe": "a", "coPartitioned": "sometimes"}, "coPartitioned must be true"),
        ({**BASE, "subscribe": "a", "kafka.auto.offset.reset": "earliest"}, "startingOffsets"),
        ({**BASE, "subscribe": "a", "kafka.enable.auto.commit": "true"}, "not supported"),
        ({**BASE, "subscribe": "a", "endingOffsets": "latest"}, "batch queries"),
    ],
)
def test_source_errors_name_the_option(options: dict[str, str], message: str) -> None:
    with pytest.raises(OptionError, match=message.replace("(", r"\(").replace(")", r"\)")):
        parse_source(options)


def test_sink_options() -> None:
    assert parse_sink({**BASE, "topic": "out"}, ["key", "value"]).topic == "out"
    assert parse_sink(BASE, ["value", "topic"]).topic is None
    with pytest.raises(OptionError, match="'value' column"):
        parse_sink({**BASE, "topic": "out"}, ["key"])
    with pytest.raises(OptionError, match="set option topic"):
        parse_sink(BASE, ["value"])
    with pytest.raises(OptionError, match="drop or rename"):
        parse_sink({**BASE, "topic": "out"}, ["value", "extra"])
