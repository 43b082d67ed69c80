"""``streamscale run enrichment|game-sessions``: run a pipeline until Ctrl-C, or catch up and exit.

Settings come, from strongest to weakest, from the command-line options, the environment
(``STREAMSCALE_*``), then ``--config FILE``: a ``.env``-style file of ``STREAMSCALE_NAME=value``
lines (the same names as the environment variables; ``#`` comments; an unknown
``STREAMSCALE_`` name is an error). Example::

    STREAMSCALE_BOOTSTRAP_SERVERS=kafka-1:9093,kafka-2:9093
    STREAMSCALE_SECURITY_PROTOCOL=SASL_SSL
    STREAMSCALE_SASL_MECHANISM=SCRAM-SHA-512
    STREAMSCALE_SASL_USERNAME=enrichment
    STREAMSCALE_SASL_PASSWORD=...
    STREAMSCALE_CHECKPOINT_DIR=s3a://bucket/checkpoints
    STREAMSCALE_MAX_OFFSETS_PER_TRIGGER=250000
"""

from __future__ import annotations

from collections.abc import Callable
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from streamscale.autoscale.policy import PolicyKind
from streamscale.autoscale.runtime import AutoscaleOptions, elastic_conf
from streamscale.settings import Settings, load_settings

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from streamscale.lag.model import LagTracker


def autoscaler(
    options: AutoscaleOptions, settings: Settings
) -> Callable[[SparkSession, LagTracker, str], Callable[[], None]]:
    """The runner's hook that attaches the autoscaler to the pipeline's query (the same
    runtime as :func:`streamscale.attach`, on the runner's own lag model and /metrics).

    The session's settings go through the same start check as ``attach``'s
    (:func:`~streamscale.autoscale.headroom.headroom`, without asking a standalone Master):
    on Kubernetes a driver on loopback is refused, a pod cap bounds the count."""

    def attach(spark: SparkSession, tracker: LagTracker, query: str) -> Callable[[], None]:
        import dataclasses

        from streamscale.autoscale.headroom import headroom
        from streamscale.autoscale.runtime import start_autoscaler
        from streamscale.errors import ConfigError

        conf = {str(k): str(v) for k, v in spark.sparkContext.getConf().getAll()}
        master = str(spark.sparkContext.master)
        room = headroom(master, conf, options.min_executors, options.max_executors)
        if room.fatal:
            raise ConfigError(room.message or "the executor count cannot move")
        if room.message is not None:
            typer.echo(f"{query}: warning: {room.message}", err=True)
        bounded = dataclasses.replace(options, max_executors=room.bound(options.max_executors))
        controller = start_autoscaler(spark, query, tracker, bounded, settings=settings)
        typer.echo(
            f"{query}: autoscaler on ({bounded.policy} policy, "
            f"{bounded.min_executors}-{bounded.max_executors} executors)"
        )
        return controller.stop

    return attach


class PipelineName(StrEnum):
    """The pipelines ``run`` knows."""

    enrichment = "enrichment"
    game_sessions = "game-sessions"


class SourceChoice(StrEnum):
    """``--source`` choices."""

    auto = "auto"
    kafka = "kafka"
    streamscale_kafka = "streamscale-kafka"


class StateStore(StrEnum):
    """``--state-store`` choices."""

    rocksdb = "rocksdb"
    hdfs = "hdfs"


def run(
    pipeline: PipelineName = typer.Argument(..., help="enrichment | game-sessions"),
    config: Path | None = typer.Option(
        None, "--config", help=".env-style file of STREAMSCALE_NAME=value lines"
    ),
    bootstrap: str | None = typer.Option(
        None, "--bootstrap", help="Kafka bootstrap servers (STREAMSCALE_BOOTSTRAP_SERVERS)"
    ),
    checkpoint: str | None = typer.Option(
        None,
        "--checkpoint",
        help="Checkpoint location (default: <STREAMSCALE_CHECKPOINT_DIR>/<pipeline>)",
    ),
    master: str | None = typer.Option(
        None, "--master", help="Spark master (STREAMSCALE_SPARK_MASTER)"
    ),
    driver_host: str | None = typer.Option(
        None,
        "--driver-host",
        help="Address executors reach the driver at (STREAMSCALE_DRIVER_HOST; default: "
        "127.0.0.1 for a local master, else this host's address on the route to the master)",
    ),
    trigger_interval: float | None = typer.Option(
        None, "--trigger-interval", help="Seconds between micro-batches (0: back to back)"
    ),
    max_offsets_per_trigger: int | None = typer.Option(
        None, "--max-offsets-per-trigger", help="Records per micro-batch, all partitions"
    ),
    state_store: StateStore | None = typer.Option(
        None, "--state-store", help="rocksdb (default) | hdfs (enrichment only)"
    ),
    source: SourceChoice | None = typer.Option(
        None,
        "--source",
        help="Kafka reader: auto (the pipeline's measured default) | kafka (Spark's "
        "connector) | streamscale-kafka (STREAMSCALE_KAFKA_SOURCE)",
    ),
    starting_offsets: str | None = typer.Option(
        None, "--starting-offsets", help="earliest | latest: where a first run starts"
    ),
    delivery: str | None = typer.Option(
        None,
        "--delivery",
        help="Output delivery: at-least-once (default) | exactly-once (Kafka transactions; "
        "readers must set isolation.level=read_committed) (STREAMSCALE_DELIVERY)",
    ),
    available_now: bool = typer.Option(
        False, "--available-now", help="Process what the topics hold now, then exit"
    ),
    metrics_port: int | None = typer.Option(
        None, "--metrics-port", help="/metrics port (STREAMSCALE_METRICS_PORT; 0 free, -1 none)"
    ),
    autoscale: bool = typer.Option(
        False, "--autoscale", help="Drive the executor count from lag and rates"
    ),
    policy: PolicyKind = typer.Option(PolicyKind.RATE, "--policy", help="rate | lag"),
    min_executors: int = typer.Option(1, "--min-executors", help="Executors at least"),
    max_executors: int = typer.Option(2, "--max-executors", help="Executors at most"),
    autoscale_interval: float = typer.Option(
        10.0, "--autoscale-interval", help="Seconds between autoscaler decisions"
    ),
    window: float = typer.Option(
        60.0, "--window", help="Stabilization window: seconds without backlog before a scale-in"
    ),
    lag_threshold: float = typer.Option(
        10_000.0, "--lag-threshold", help="lag policy: records of lag per executor"
    ),
    surge_share: float = typer.Option(
        0.0,
        "--surge-share",
        help="rate policy: a scale-in keeps headroom for a surge of this share of the input "
        "until a scale-out may follow it (0: none assumed)",
    ),
    reverse_for_slo: bool = typer.Option(
        False,
        "--reverse-for-slo",
        help="rate policy: a scale-out may reverse a recent scale-in once the time-lag "
        "objective is broken or a rising input is predicted to break it",
    ),
    decision_log: Path | None = typer.Option(
        None, "--decision-log", help="JSON-lines file of every autoscaler decision"
    ),
) -> None:
    """Run a pipeline; print one line per batch; Ctrl-C or SIGTERM stops after the batch."""
    from streamscale.pipelines.runner import run as run_pipeline

    try:
        settings = load_settings(
            config,
            bootstrap_servers=bootstrap,
            spark_master=master,
            driver_host=driver_host,
            trigger_interval_s=trigger_interval,
            max_offsets_per_trigger=max_offsets_per_trigger,
            state_store=state_store.value if state_store else None,
            starting_offsets=starting_offsets,
            kafka_source=source.value if source else None,
            metrics_port=metrics_port,
            delivery=delivery,
        )
        elastic = (
            AutoscaleOptions(
                policy=policy,
                min_executors=min_executors,
                max_executors=max_executors,
                interval_s=autoscale_interval,
                stabilization_window_s=window,
                lag_threshold=lag_threshold,
                surge_share=surge_share,
                reverse_for_slo=reverse_for_slo,
                decision_log=decision_log,
            )
            if autoscale
            else None
        )
        # What the cluster manager needs; refused here, before Spark starts, in local mode.
        extra = elastic_conf(settings.spark_master, elastic) if elastic is not None else None
    except ValueError as exc:  # SettingsError and the options' ConfigError included
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    try:
        totals = run_pipeline(
            pipeline.value,
            settings,
            available_now=available_now,
            checkpoint=checkpoint,
            extra_conf=extra,
            attach=None if elastic is None else autoscaler(elastic, settings),
        )
    except Exception as exc:  # a failed query's error is a whole trace: its one telling line
        from streamscale.kafka.client import first_error_line

        typer.echo(f"error: {first_error_line(str(exc), settings.sasl_username)}", err=True)
        raise typer.Exit(1) from None
    summary = ", ".join(f"{k}={v:,}" for k, v in sorted(totals.items()) if v)
    typer.echo(f"{pipeline.value}: stopped; totals: {summary or 'nothing processed'}")
