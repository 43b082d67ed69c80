"""``streamscale kube start|stop|status``: a Kubernetes control plane and one node on this
machine (etcd, kube-apiserver, kube-controller-manager, kube-scheduler built by ``make setup``;
the node agent runs pods as local processes), to try the Helm chart as with kind or minikube."""

from __future__ import annotations

from pathlib import Path

import typer

from streamscale import processes
from streamscale.kube import controlplane as kube

app = typer.Typer(
    help="A local Kubernetes (control plane built by `make setup`, one node agent) on 127.0.0.1."
)

DATA_DIR = typer.Option(
    kube.DEFAULT_DATA_DIR, "--data-dir", help="etcd's data, certificates, kubeconfigs, PIDs, logs"
)


@app.command()
def start(
    port: int | None = typer.Option(None, help="API server port (default: a free one)"),
    node: str = typer.Option(kube.DEFAULT_NODE, help="Name of the node the agent registers"),
    data_dir: Path = DATA_DIR,
) -> None:
    """Start the control plane and the node agent; write the admin kubeconfig and print how
    to use it."""
    try:
        plane = kube.start(data_dir, apiserver_port=port)
        kube.start_node(plane, node)
    except kube.KubeError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from None
    kubectl = kube.bin_dir() / "kubectl"
    typer.echo(f"API server  {plane.server}")
    typer.echo(f"kubeconfig  {plane.admin_kubeconfig}")
    typer.echo(f"try         KUBECONFIG={plane.admin_kubeconfig} {kubectl} get nodes")


@app.command()
def stop(data_dir: Path = DATA_DIR) -> None:
    """Stop the node agent (and its pods), the control plane, by recorded PID."""
    stopped = kube.stop(data_dir)
    typer.echo(f"kubernetes stopped ({stopped} processes)" if stopped else "no kubernetes running")


@app.command()
def status(data_dir: Path = DATA_DIR) -> None:
    """Print the API server, its readiness and the running components (exit 1 when none)."""
    plane = kube.running(data_dir)
    if plane is None:
        typer.echo("no kubernetes running")
        raise typer.Exit(1)
    typer.echo(f"API server  {plane.server} ({'ready' if plane.ready() else 'not ready'})")
    typer.echo(f"kubeconfig  {plane.admin_kubeconfig}")
    for name, pid in plane.pids().items():
        typer.echo(f"{name:24s} pid={pid}")
    for name in kube.node_names(plane.data_dir):
        managed = processes.load(plane.data_dir, name)
        if managed is not None and managed.alive():
            typer.echo(f"{name:24s} pid={managed.pid}")
