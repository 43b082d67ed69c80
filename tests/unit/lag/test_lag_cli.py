"""``streamscale lag``: metrics parsing, checkpoint reading, table, command."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from streamscale.cli import lag as cli
from streamscale.cli.main import app
from streamscale.lag.metrics import MetricsServer, start_metrics
from streamscale.lag.model import BatchStats, LagTracker, PartitionOffsets, ProgressSample

META = '{"batchWatermarkMs":0,"batchTimestampMs":1795345687006,"conf":{}}'


def _write_checkpoint(root: Path, batches: dict[int, list[str]], committed: list[int]) -> Path:
    (root / "offsets").mkdir(parents=True)
    (root / "commits").mkdir()
    for batch, sources in batches.items():
        (root / "offsets" / str(batch)).write_text("\n".join(["v1", META, *sources]))
    for batch in committed:
        (root / "commits" / str(batch)).write_text('v1\n{"nextBatchWatermarkMs":0}')
        (root / "commits" / f".{batch}.crc").write_text("x")
    return root


def test_committed_offsets_reads_newest_committed_batch(tmp_path: Path) -> None:
    ck = _write_checkpoint(
        tmp_path / "ck",
        {
            0: ['{"a": {"0": 5}}'],
            1: ['{"a": {"0": 10, "1": 3}}', "-", "17"],  # a source with no offset, a rate
            2: ['{"a": {"0": 99, "1": 99}}'],  # planned, not committed
        },
        committed=[0, 1],
    )
    assert cli.committed_offsets(ck) == (1, {("a", 0): 10, ("a", 1): 3})


@pytest.mark.parametrize(
    ("batches", "committed", "message"),
    [
        ({}, [], "no committed batch"),
        ({0: ["17"]}, [0], "no Kafka offsets"),
        ({}, [3], "cannot read"),
    ],
)
def test_committed_offsets_errors(
    tmp_path: Path, batches: dict[int, list[str]], committed: list[int], message: str
) -> None:
    ck = _write_checkpoint(tmp_path / "ck", batches, committed)
    with pytest.raises(cli.CheckpointError, match=message):
        cli.committed_offsets(ck)


def test_not_a_checkpoint(tmp_path: Path) -> None:
    with pytest.raises(cli.CheckpointError, match="not a streaming checkpoint"):
        cli.committed_offsets(tmp_path)


def test_rows_from_offsets_and_table() -> None:
    rows = cli.rows_from_offsets("q", {("a", 1): 3, ("a", 0): 10}, {("a", 0): 15})
    assert rows == [
        cli.LagRow("q", "a", 0, 15, 10, 5, None),
        cli.LagRow("q", "a", 1, None, 3, None, None),
    ]
    lines = cli.format_table(rows).splitlines()
    assert lines[0].split() == list(cli.HEADER)
    assert lines[1].split() == ["q", "a", "0", "15", "10", "5", "-"]
    assert lines[2].split() == ["q", "a", "1", "-", "3", "-", "-"]


def _tracker() -> LagTracker:
    tracker = LagTracker()
    for t, end, done in [(100.0, 1000, 0), (110.0, 2000, 1000)]:
        parts = (PartitionOffsets("achats", 0, end, done), PartitionOffsets("achats", 1, 7, 7))
        tracker.ingest(ProgressSample("enrich", t, parts, BatchStats(0, t, 1, 1.0, 1.0)))
    return tracker


@pytest.fixture
def endpoint() -> Iterator[MetricsServer]:
    server = start_metrics(_tracker(), port=0)
    try:
        yield server
    finally:
        server.stop()


def test_rows_from_metrics(endpoint: MetricsServer) -> None:
    rows, ages = cli.rows_from_metrics(cli.fetch_metrics(endpoint.url))
    assert [(r.topic, r.partition, r.end_offset, r.processed_offset, r.lag) for r in rows] == [
        ("achats", 0, 2000, 1000, 1000),
        ("achats", 1, 7, 7, 0),
    ]
    assert rows[0].time_lag_s is not None and rows[0].time_lag_s > 0
    assert rows[1].time_lag_s == 0
    assert set(ages) == {"enrich"}


def test_command_metrics_url(endpoint: MetricsServer) -> None:
    result = CliRunner().invoke(app, ["lag", "--metrics-url", endpoint.url])
    assert result.exit_code == 0, result.output
    assert "PROCESSED-OFFSET" in result.output
    assert "enrich  achats  0" in result.output
    assert "newest sample" in result.output
    result = CliRunner().invoke(app, ["lag", "--metrics-url", endpoint.url, "--query", "other"])
    assert result.exit_code == 0 and "no lag reported" in result.output


def test_command_usage_and_unreachable(tmp_path: Path) -> None:
    runner = CliRunner()
    assert runner.invoke(app, ["lag"]).exit_code == 2
    both = ["lag", "--metrics-url", "http://127.0.0.1:1/metrics", "--checkpoint", str(tmp_path)]
    assert runner.invoke(app, both).exit_code == 2
    server = start_metrics(LagTracker(), port=0)
    url = server.url
    server.stop()
    result = runner.invoke(app, ["lag", "--metrics-url", url])
    assert result.exit_code == 1
    assert "cannot read" in result.output


def test_command_checkpoint(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ck = _write_checkpoint(tmp_path / "ck", {0: ['{"a": {"0": 10}}']}, committed=[0])
    seen = {}

    def fake_end_offsets(settings, tps):  # type: ignore[no-untyped-def]
        seen["servers"] = settings.bootstrap_servers
        return {tp: 25 for tp in tps}

    monkeypatch.setattr(cli, "end_offsets", fake_end_offsets)
    args = ["lag", "--checkpoint", str(ck), "--bootstrap", "127.0.0.1:1"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert result.output.splitlines()[1].split() == ["ck", "a", "0", "25", "10", "15", "-"]
    assert seen == {"servers": "127.0.0.1:1"}
    missing = CliRunner().invoke(app, ["lag", "--checkpoint", str(tmp_path / "none")])
    assert missing.exit_code == 1 and "not a streaming checkpoint" in missing.output
