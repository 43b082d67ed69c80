"""``streamscale cluster start|stop|status``: a Spark standalone cluster on this machine
(127.0.0.1 by default, ``--host`` for another of its addresses)."""

from __future__ import annotations

from pathlib import Path

import typer

from streamscale import cluster as local

app = typer.Typer(
    help="A Spark standalone cluster (Master + Workers) on this machine, 127.0.0.1 by default."
)

DATA_DIR = typer.Option(local.DEFAULT_DATA_DIR, "--data-dir", help="PIDs, logs, work dirs")


@app.command()
def start(
    workers: int = typer.Option(1, min=1, help="Number of Workers"),
    cores: int = typer.Option(2, min=1, help="Cores offered by each Worker"),
    memory: str = typer.Option("2g", help="Memory offered by each Worker (512m, 2g...)"),
    port: int | None = typer.Option(None, help="Master port (default: a free one)"),
    webui_port: int | None = typer.Option(None, help="Master web UI port (default: free)"),
    host: str = typer.Option(
        local.HOST,
        "--host",
        help="Address the Master, Workers and their executors listen on and advertise: one of "
        "this machine's that the driver reaches",
    ),
    data_dir: Path = DATA_DIR,
) -> None:
    """Start the Master and Workers, wait until every Worker is ALIVE, print the master URL."""
    from streamscale.network import check_host

    try:
        running = local.start(
            workers,
            cores,
            memory,
            port=port,
            webui_port=webui_port,
            data_dir=data_dir,
            host=check_host(host, "--host"),
        )
    except (local.ClusterError, ValueError) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from None
    typer.echo(running.master_url)


@app.command()
def stop(data_dir: Path = DATA_DIR) -> None:
    """Stop the Workers (and their executors), then the Master, by recorded PID."""
    try:
        stopped = local.stop(data_dir)
    except local.ClusterError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from None
    typer.echo(f"cluster stopped ({stopped} processes)" if stopped else "no cluster running")


@app.command()
def status(data_dir: Path = DATA_DIR) -> None:
    """Print master URL, workers, cores, memory and running apps (exit 1 when none runs)."""
    running = local.running(data_dir)
    if running is None:
        typer.echo("no cluster running")
        raise typer.Exit(1)
    state = running.status()
    if state is None:
        typer.echo(f"{running.master_url} pid={running.master_pid}: the master does not answer")
        raise typer.Exit(1)
    typer.echo(state.describe())
    typer.echo(f"web UI   {running.webui_url}")
