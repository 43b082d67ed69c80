"""``streamscale attach -- python job.py ARGS``: an unmodified PySpark job, autoscaled."""

from __future__ import annotations

from pathlib import Path

import typer

from streamscale.autoscale.policy import PolicyKind


def attach(
    command: list[str] = typer.Argument(
        ...,
        metavar="-- COMMAND...",
        help="The job: python job.py ARGS, or spark-submit [OPTIONS] job.py ARGS",
    ),
    master: str | None = typer.Option(
        None,
        "--master",
        help="Spark master, as spark-submit takes it (spark://host:port, k8s://...; default: "
        "the command's own --master, else a local standalone cluster started for the job)",
    ),
    min_executors: int = typer.Option(1, "--min-executors", help="Executors at least"),
    max_executors: int = typer.Option(2, "--max-executors", help="Executors at most"),
    policy: PolicyKind = typer.Option(PolicyKind.RATE, "--policy", help="rate | lag"),
    decision_log: Path | None = typer.Option(
        None, "--decision-log", help="JSON-lines file of every autoscaler decision"
    ),
    metrics_port: int = typer.Option(
        9464, "--metrics-port", help="/metrics port on 127.0.0.1 (0: a free one, -1: none)"
    ),
    interval: float = typer.Option(
        10.0, "--autoscale-interval", help="Seconds between autoscaler decisions"
    ),
    window: float = typer.Option(
        60.0, "--window", help="Stabilization window: seconds without backlog before a scale-in"
    ),
    data_dir: Path | None = typer.Option(
        None, "--data-dir", help="The local cluster's logs and PIDs (default: a temporary dir)"
    ),
) -> None:
    """Run a PySpark job with the autoscaler, the lag metrics and the group commits attached
    to the session it builds, with no change to its code. Exits with the job's exit code;
    stops the autoscaler, /metrics and the local cluster when the job exits."""
    from streamscale.autoscale.launch import PREFIX, AttachOptions, run
    from streamscale.errors import Error

    try:
        options = AttachOptions(
            min_executors=min_executors,
            max_executors=max_executors,
            policy=policy.value,
            metrics_port=None if metrics_port < 0 else metrics_port,
            interval_s=interval,
            stabilization_window_s=window,
            decision_log=None if decision_log is None else str(decision_log.absolute()),
        )
        code = run(
            command,
            options,
            master=master,
            data_dir=data_dir,
            say=lambda line: typer.echo(line, err=True),
        )
    except (Error, ValueError) as exc:
        typer.echo(f"{PREFIX}: error: {exc}", err=True)
        raise typer.Exit(2) from None
    raise typer.Exit(code)
