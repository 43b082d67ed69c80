"""``streamscale broker start|stop|status``: the embedded Apache Kafka cluster (KRaft)."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from streamscale.kafka import broker as embedded

app = typer.Typer(
    help="The embedded Apache Kafka cluster (KRaft, one node or three), on 127.0.0.1 by default."
)

DATA_DIR = typer.Option(
    embedded.DEFAULT_DATA_DIR, "--data-dir", help="Cluster layout, node data, PIDs and logs"
)


@app.command()
def start(
    nodes: int = typer.Option(1, "--nodes", help="1, or 3 for a replicated cluster"),
    port: int | None = typer.Option(None, help="First node's port (default: a free one)"),
    host: str = typer.Option(
        embedded.HOST,
        "--host",
        help="Address the nodes listen on and advertise: one of this machine's that the "
        "clients reach (fixed when the data dir is formatted)",
    ),
    secure: bool = typer.Option(
        False,
        "--secure",
        help="TLS and SASL/SCRAM-SHA-512 on the client listener, ACLs on (fixed when the data "
        "dir is formatted): a CA, an admin and a pipeline principal are made in "
        "<data-dir>/security; their passwords stay in files of mode 0600",
    ),
    data_dir: Path = DATA_DIR,
) -> None:
    """Format (once) and start the nodes, wait until every one is registered, print the
    bootstrap list (with --secure, then what a client needs). Data stays in --data-dir: a
    restart keeps it."""
    from streamscale.network import check_host

    try:
        running = embedded.start(
            port, data_dir, nodes=nodes, host=check_host(host, "--host"), secure=secure
        )
    except (embedded.BrokerError, ValueError, RuntimeError) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from None
    typer.echo(running.bootstrap)
    if running.secure:
        _print_client_files(data_dir)


def _print_client_files(data_dir: Path) -> None:
    from streamscale.kafka import security

    where = security.files(data_dir)
    typer.echo(f"CA certificate: {where.ca_pem}")
    typer.echo(
        f"# the pipeline principal's settings ({where.env(security.PIPELINE)}; "
        "the password stays in its file):"
    )
    typer.echo(where.env(security.PIPELINE).read_text().rstrip("\n"))
    typer.echo(
        f"# the admin's: {where.env(security.ADMIN)}; Kafka's tools: --command-config "
        f"{where.properties(security.ADMIN)}"
    )


@app.command()
def stop(data_dir: Path = DATA_DIR) -> None:
    """Stop every node by its recorded PID (SIGTERM, SIGKILL after a grace period)."""
    if embedded.stop(data_dir):
        typer.echo("broker stopped")
    else:
        typer.echo("no broker running")


@app.command()
def status(
    data_dir: Path = DATA_DIR,
    as_json: bool = typer.Option(False, "--json", help="One JSON document: every node"),
) -> None:
    """Print the running cluster's bootstrap list and nodes (exit 1 when none runs)."""
    running = embedded.status(data_dir)
    if as_json:
        typer.echo(
            json.dumps(
                {
                    "bootstrap": running.bootstrap if running else None,
                    "nodes": embedded.describe(data_dir),
                },
                indent=2,
            )
        )
        if running is None:
            raise typer.Exit(1)
        return
    if running is None:
        typer.echo("no broker running")
        raise typer.Exit(1)
    typer.echo(running.bootstrap)
    for node in running.nodes:
        typer.echo(f"node {node.node_id} {node.address} pid={node.pid} log={node.log}")
