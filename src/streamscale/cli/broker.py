"""``streamscale broker start|stop|status``: the embedded broker."""

from __future__ import annotations

from pathlib import Path

import typer

from streamscale.kafka import broker as embedded

app = typer.Typer(help="The embedded Kafka-compatible broker (Tansu), on 127.0.0.1.")

DATA_DIR = typer.Option(embedded.DEFAULT_DATA_DIR, "--data-dir", help="PID, address and log")


@app.command()
def start(
    port: int | None = typer.Option(None, help="Port on 127.0.0.1 (default: a free one)"),
    data_dir: Path = DATA_DIR,
) -> None:
    """Start the broker, wait until it answers, print its bootstrap address."""
    try:
        running = embedded.start(port, data_dir)
    except embedded.BrokerError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from None
    typer.echo(running.bootstrap)


@app.command()
def stop(data_dir: Path = DATA_DIR) -> None:
    """Stop the broker by its recorded PID."""
    if embedded.stop(data_dir):
        typer.echo("broker stopped")
    else:
        typer.echo("no broker running")


@app.command()
def status(data_dir: Path = DATA_DIR) -> None:
    """Print the running broker's bootstrap address and PID (exit 1 when none runs)."""
    running = embedded.status(data_dir)
    if running is None:
        typer.echo("no broker running")
        raise typer.Exit(1)
    typer.echo(f"{running.bootstrap} pid={running.pid} log={running.log}")
