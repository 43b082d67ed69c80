"""``streamscale demo``: the whole experiment on one machine, in one command."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from streamscale.autoscale.policy import PolicyKind


def demo(
    duration: float = typer.Option(240.0, help="Seconds of the run (the report comes after)"),
    pipeline: str = typer.Option("game-sessions", help="game-sessions or enrichment"),
    profile: str | None = typer.Option(
        None,
        help="Load phases, e.g. steady:800:40,burst:200000,steady:800:70 "
        "(default: steady, a burst, steady, scaled to --duration)",
    ),
    rate: float = typer.Option(800.0, help="Records/s of the default profile's steady phases"),
    burst: int = typer.Option(
        450_000,
        help="Frames of the default profile's burst (sized so that one executor cannot drain "
        "it within the 30 s SLO: see docs/benchmarks.md)",
    ),
    report_dir: Path = typer.Option(Path("streamscale-report"), help="Where the report goes"),
    metrics_port: int = typer.Option(9464, help="/metrics port on 127.0.0.1 (0: a free one)"),
    policy: PolicyKind = typer.Option(PolicyKind.RATE, help="Autoscaling policy"),
    max_executors: int = typer.Option(2, help="Executors at most (2 cores here)"),
    control_interval: float = typer.Option(5.0, help="Seconds between autoscaler decisions"),
    window: float = typer.Option(30.0, help="Stabilization window before a scale-in (s)"),
    data_dir: Path | None = typer.Option(None, help="Broker/cluster/checkpoints (default: temp)"),
    seed: int = typer.Option(7, help="Seed of the load generator"),
    source: str = typer.Option(
        "kafka",
        help="How the pipeline reads Kafka: kafka (Spark's connector), streamscale-kafka, or "
        "auto (the pipeline's measured default)",
    ),
    delivery: str = typer.Option(
        "at-least-once",
        help="Output delivery: at-least-once or exactly-once (Kafka transactions; the "
        "verification reads with isolation.level=read_committed)",
    ),
    secure: bool = typer.Option(
        False,
        help="Run on a secured broker (SASL_SSL, SCRAM-SHA-512, ACLs, as `broker start "
        "--secure`): the pipeline as a principal granted only its topics and groups",
    ),
) -> None:
    """Broker, local Spark cluster, pipeline, autoscaler and load: lag rises, executors are
    added, lag falls, they are given back. Writes report.html, PNGs and summary.json."""
    from streamscale.experiment import ExtraMissingError, require_extra

    try:
        require_extra("streamscale demo")
    except ExtraMissingError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from None
    from streamscale.experiment.demo import DemoError, DemoOptions, run_demo

    options = DemoOptions(
        duration_s=duration,
        pipeline=pipeline,
        profile=profile,
        rate=rate,
        burst=burst,
        report_dir=report_dir,
        data_dir=data_dir,
        metrics_port=metrics_port,
        max_executors=max_executors,
        policy=policy,
        control_interval_s=control_interval,
        stabilization_window_s=window,
        seed=seed,
        source=source,
        delivery=delivery,
        secure=secure,
    )
    try:
        summary = run_demo(options)
    except DemoError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from None
    except KeyboardInterrupt:
        typer.echo("interrupted: everything started was stopped", err=True)
        raise typer.Exit(130) from None
    keys = (
        "verified",
        "records_in",
        "records_out",
        "max_lag",
        "final_lag",
        "drain_time_s",
        "scale_outs",
        "scale_ins",
        "scale_events_measured",
        "max_scale_pause_s",
        "state_reloaded_after_scaling",
        "first_processed_s",
        "peak_memory_mb",
        "run_seconds",
    )
    typer.echo(json.dumps({k: summary.get(k) for k in keys}, indent=2))
    for move in summary.get("state_moves") or ():
        # RocksDB's own count of loads (rocksdbNumLoadedFromDfs) stays 0 when a partition
        # moves: the bytes copied from the checkpoint and their load time show the move.
        if move["pause_s"] is None:
            cost = "state copied and pause not measured"
        else:
            cost = (
                f"{(move['bytes_copied'] or 0) / 1e6:.1f} MB of state copied in "
                f"{move['load_s'] or 0:.2f} s, pause {move['pause_s']:.2f} s"
            )
        typer.echo(
            f"{move['t_s']:.0f} s: {move['before']} -> {move['after']} executors, "
            f"{move['removed_partitions']} state partitions on removed executors, {cost}"
        )
    typer.echo(f"report: {report_dir / 'report.html'}")
    if not summary.get("verified"):
        typer.echo(f"error: {summary.get('verification')}", err=True)
        raise typer.Exit(2)
