"""Pure parts of the fault suite (issue 13): reconciliation by key, one-line errors, and the
dead-lettering of records without which a pipeline cannot trace or use a record."""

from __future__ import annotations

import pyarrow as pa
from hypothesis import given
from hypothesis import strategies as st

from streamscale.experiment.verify import reconcile
from streamscale.kafka.client import first_error_line
from streamscale.pipelines import deadletter as dl
from streamscale.pipelines import frame_batches as fb
from streamscale.pipelines import purchase_batches as pb
from streamscale.pipelines.hits import FrameHeader, header_json


def source_batch(records: list[tuple[bytes | None, bytes | None]], topic: str) -> pa.RecordBatch:
    n = len(records)
    return pa.RecordBatch.from_arrays(
        [
            pa.array([k for k, _ in records], pa.binary()),
            pa.array([v for _, v in records], pa.binary()),
            pa.array([topic] * n, pa.string()),
            pa.array([0] * n, pa.int32()),
            pa.array(range(n), pa.int64()),
            pa.array([0] * n, pa.timestamp("us", tz="UTC")),
        ],
        names=["key", "value", "topic", "partition", "offset", "timestamp"],
    )


def test_reconcile_counts_lost_duplicated_and_unexpected() -> None:
    got = reconcile([b"a", b"b", b"c", b"c"], [b"a", b"a", b"c", b"x"], [b"b"])
    assert (got.records_in, got.out, got.dead_lettered) == (4, 4, 1)
    assert (got.lost, got.duplicated, got.unexpected) == (1, 1, 1)
    assert got.lost_keys == (b"c",)
    assert not got.ok


@given(st.lists(st.sampled_from([b"a", b"b", b"c", None]), max_size=30), st.data())
def test_reconcile_of_a_replay_has_no_loss(keys: list[bytes | None], data: st.DataObject) -> None:
    """Output = input split between output and dead letters, plus a replayed slice: nothing
    lost, and exactly the replayed records duplicated."""
    cut = data.draw(st.integers(0, len(keys)))
    start = data.draw(st.integers(0, len(keys)))
    replay = keys[start : start + data.draw(st.integers(0, 10))]
    got = reconcile(keys, keys[:cut] + replay, keys[cut:])
    assert got.lost == 0 and got.unexpected == 0 and got.ok
    assert got.duplicated == len(replay)
    assert got.records_in == got.out + got.dead_lettered - got.duplicated


def test_first_error_line_finds_the_delivery_error_in_a_trace() -> None:
    trace = (
        "org.apache.spark.sql.streaming.StreamingQueryException: [FOREACH_BATCH] ...\n"
        "  File x.py, line 3\n"
        "streamscale.kafka.client.DeliveryError: NOT_ENOUGH_REPLICAS: t-0 has 1 live ...\n"
        "\tat org.apache.spark...\n"
    )
    assert first_error_line(trace) == "DeliveryError: NOT_ENOUGH_REPLICAS: t-0 has 1 live ..."
    assert first_error_line("\n  plain failure\nmore") == "plain failure"


def test_a_purchase_without_key_is_dead_lettered_whatever_its_value() -> None:
    batch = source_batch(
        [(None, b'{"id":1,"price":2.50}'), (b"k", b'{"id":1,"price":2.50}'), (None, None)],
        "achats",
    )
    out = pb.Enriched()
    rows = pb.enrich(batch, pb.NameTable.of({1: "One"}), {}, "out", out)
    assert rows.column("key").to_pylist() == [b"k"]
    assert [(d.offset, d.error) for d in out.dead] == [(0, dl.NULL_KEY), (2, dl.NULL_KEY)]
    assert out.counts["purchases"] == 3 == out.counts["enriched"] + out.counts["purchases_dlq"]


def test_an_approval_tombstone_is_dead_lettered() -> None:
    header = header_json(FrameHeader(0, "123456", "EU"))  # approved at 0: in time
    batch = source_batch([(header.encode(), None), (header.encode(), b"{}")], "RS")
    out = fb.Frames()
    fb.read_approvals(batch, out, 3000)
    assert [(d.offset, d.error) for d in out.dead] == [(0, dl.NULL_VALUE)]
    assert out.counts["approvals_dlq.records"] == 1
    assert sum(t.num_rows for t in out.approvals) == 1
