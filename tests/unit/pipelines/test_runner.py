"""The pipeline runner's pure parts: lag and progress lines, triggers, clean stop."""

from __future__ import annotations

import json
import os
import signal
import threading
from pathlib import Path
from typing import Any

import pytest

from streamscale.pipelines.runner import (
    StopRequest,
    drive,
    format_progress,
    make_pipeline,
    progress_data,
    records_lag,
    trigger_for,
)
from streamscale.settings import Settings
from streamscale.settings import load_settings as load

PROGRESS: dict[str, Any] = {
    "batchId": 7,
    "numInputRows": 250_000,
    "inputRowsPerSecond": 81_000.4,
    "processedRowsPerSecond": 120_000.0,
    "sources": [
        {
            "description": "KafkaV2[Subscribe[achats]]",
            "endOffset": {"achats": {"0": 100, "1": 200}},
            "latestOffset": {"achats": {"0": 150, "1": 200}},
        },
        {
            "description": "KafkaV2[Subscribe[referentiel]]",
            "endOffset": json.dumps({"referentiel": {"0": 10}}),
            "latestOffset": json.dumps({"referentiel": {"0": 12, "1": 3}}),
        },
    ],
}


def test_records_lag_sums_latest_minus_end_over_every_partition() -> None:
    # 50 + 0 + 2 + 3 (a partition absent from the end offsets counts from 0)
    assert records_lag(PROGRESS) == 55


@pytest.mark.parametrize(
    "sources",
    [[], [{"endOffset": {"t": {"0": 1}}, "latestOffset": None}], [{"latestOffset": "not json"}]],
)
def test_records_lag_is_unknown_without_latest_offsets(sources: list[Any]) -> None:
    assert records_lag({"sources": sources}) is None


def test_records_lag_never_negative() -> None:
    source = {"description": "KafkaV2[Subscribe[t]]", "endOffset": {"t": {"0": 9}}}
    progress = {"sources": [{**source, "latestOffset": {"t": {"0": 5}}}]}
    assert records_lag(progress) == 0


def test_format_progress_shows_rows_rates_lag_and_nonzero_counts() -> None:
    line = format_progress(PROGRESS, {"enriched": 249_990, "purchases_dlq": 10, "unknown": 0})
    assert line == (
        "batch 7 | rows 250,000 | in 81,000/s | processed 120,000/s | lag 55 | "
        "enriched=249,990 purchases_dlq=10"
    )


def test_trigger_for() -> None:
    assert trigger_for(Settings(), available_now=True) == {"availableNow": True}
    assert trigger_for(Settings(trigger_interval_s=2.5), False) == {
        "processingTime": "2500 milliseconds"
    }
    assert trigger_for(Settings(trigger_interval_s=0), False) == {}


def test_make_pipeline_knows_both_and_refuses_others() -> None:
    assert make_pipeline("enrichment", Settings(), "/tmp/c").name == "enrichment"
    assert make_pipeline("game-sessions", Settings(), "/tmp/c").name == "game-sessions"
    with pytest.raises(ValueError, match="unknown pipeline 'nope'"):
        make_pipeline("nope", Settings(), "/tmp/c")


class FakeQuery:
    """A query that runs ``batches`` batches, one per poll, then idles until stopped."""

    def __init__(self, batches: int, busy_polls: int = 0) -> None:
        self.batches = batches
        self.recentProgress: list[dict[str, Any]] = []
        self.isActive = True
        self.stopped_while_busy = False
        self.busy_polls = busy_polls
        self.polls = 0

    @property
    def status(self) -> dict[str, Any]:
        self.polls += 1
        return {"isTriggerActive": self.polls <= self.busy_polls}

    def awaitTermination(self, timeout: float) -> bool:
        if len(self.recentProgress) < self.batches:
            n = len(self.recentProgress)
            stamp = f"2026-01-01T00:00:{n:02d}.000Z"
            self.recentProgress.append(
                {"batchId": n, "numInputRows": 10, "sources": [], "timestamp": stamp}
            )
        return False

    def stop(self) -> None:
        self.stopped_while_busy = self.status["isTriggerActive"]
        self.isActive = False


class CountingPipeline:
    name = "fake"

    def batch_counts(self, progress: Any) -> dict[str, int]:
        return {"out": 10}


def test_drive_prints_each_batch_once_and_stops_after_the_batch_in_flight() -> None:
    query = FakeQuery(batches=3, busy_polls=3)
    stop = threading.Event()
    lines: list[str] = []

    def echo(line: str) -> None:
        lines.append(line)
        if len(lines) == 3:
            stop.set()

    totals = drive(query, CountingPipeline(), stop, echo)  # type: ignore[arg-type]
    assert totals == {"out": 30}
    assert [line.split(" |")[0] for line in lines[:3]] == ["batch 0", "batch 1", "batch 2"]
    assert lines[3] == "stop requested: stopping after the current batch"
    assert not query.isActive and not query.stopped_while_busy


def test_drive_shows_a_batch_whose_id_an_idle_trigger_reported_first() -> None:
    query = FakeQuery(batches=0)
    query.recentProgress = [
        {"batchId": 2, "numInputRows": 0, "timestamp": "2026-01-01T00:00:01.000Z"},  # idle
        {"batchId": 2, "numInputRows": 5, "timestamp": "2026-01-01T00:00:02.000Z"},
        {"batchId": 3, "numInputRows": 0, "timestamp": "2026-01-01T00:00:03.000Z"},  # idle
        {
            "batchId": 3,
            "numInputRows": 0,
            "timestamp": "2026-01-01T00:00:04.000Z",
            "observedMetrics": {"join": {"unapproved": 2}},
        },
    ]
    stop = threading.Event()
    stop.set()
    lines: list[str] = []
    totals = drive(query, CountingPipeline(), stop, lines.append)  # type: ignore[arg-type]
    assert [line.split(" |")[0] for line in lines if line.startswith("batch")] == [
        "batch 2",
        "batch 3",
    ]
    assert totals == {"out": 20}


def test_stop_request_catches_sigterm_and_restores_the_handler() -> None:
    before = signal.getsignal(signal.SIGTERM)
    with StopRequest() as request:
        os.kill(os.getpid(), signal.SIGTERM)
        assert request.event.wait(5)
    assert signal.getsignal(signal.SIGTERM) == before


def test_progress_data_accepts_mappings_and_progress_objects() -> None:
    class Progress:
        json = json.dumps({"batchId": 3})

    assert progress_data({"batchId": 1}) == {"batchId": 1}
    assert progress_data(Progress()) == {"batchId": 3}


def test_config_file_then_environment_then_options(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = tmp_path / "run.env"
    config.write_text(
        "# a comment\nSTREAMSCALE_BOOTSTRAP_SERVERS=kafka-1:9093\n"
        "STREAMSCALE_SPARK_MASTER=spark://m:7077\nSTREAMSCALE_MAX_OFFSETS_PER_TRIGGER=5000\n"
    )
    monkeypatch.setenv("STREAMSCALE_SPARK_MASTER", "local[4]")
    settings = load(config, max_offsets_per_trigger=42)
    assert settings.bootstrap_servers == "kafka-1:9093"
    assert settings.spark_master == "local[4]"
    assert settings.max_offsets_per_trigger == 42

    config.write_text("STREAMSCALE_NO_SUCH_SETTING=1\n")
    with pytest.raises(ValueError, match="no_such_setting"):
        load(config)
    with pytest.raises(ValueError, match="does not exist"):
        load(tmp_path / "missing.env")


def test_run_composes_what_it_is_given_and_knows_no_autoscaler(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``run`` takes Spark settings and an attach hook from its caller (``run --autoscale``
    passes the autoscaler's): the hook gets the session, the lag model and the query's
    name before the query starts, and its stop runs after the query."""
    import streamscale.kafka.commits
    import streamscale.lag
    import streamscale.pipelines.runner as runner
    import streamscale.spark

    events: list[Any] = []

    class Query:
        id = "q-1"
        isActive = False

        def exception(self) -> None:
            return None

    class Pipeline:
        name = "game-sessions"
        source = "kafka"

        def start(self, spark: Any, trigger: Any) -> Query:
            events.append("query started")
            return Query()

    class Monitor:
        server = None
        tracker = "tracker"

        def stop(self) -> None:
            events.append("monitor stopped")

    def session(settings: Any, app_name: str, extra_conf: dict[str, str]) -> str:
        events.append(("session", extra_conf))
        return "spark"

    monkeypatch.setattr(streamscale.spark, "session", session)
    monkeypatch.setattr(streamscale.spark, "stop", lambda spark: events.append("spark stopped"))
    monkeypatch.setattr(streamscale.lag, "start_monitor", lambda spark, host, port: Monitor())
    monkeypatch.setattr(streamscale.kafka.commits, "group_committer", lambda spark: None)
    monkeypatch.setattr(runner, "make_pipeline", lambda name, settings, checkpoint: Pipeline())

    def attach(spark: Any, tracker: Any, query: str) -> Any:
        events.append(("attached", spark, tracker, query))
        return lambda: events.append("detached")

    runner.run(
        "game-sessions",
        Settings(bootstrap_servers="127.0.0.1:9092"),
        extra_conf={"spark.cores.max": "2"},
        attach=attach,
        echo=lambda line: None,
    )
    assert events == [
        ("session", {"spark.cores.max": "2"}),
        ("attached", "spark", "tracker", "game-sessions"),
        "query started",
        "detached",
        "monitor stopped",
        "spark stopped",
    ]
