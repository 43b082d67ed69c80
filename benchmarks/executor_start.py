"""An executor's start on Kubernetes against standalone, side by side in one run (issue 37).

    PYTHONPATH=src STREAMSCALE_JARS_DIR=jvm/lib .venv/bin/python benchmarks/executor_start.py \\
        [--runs 3] [--repeats 3]

Both cluster managers run on this machine for the whole run: a local standalone cluster (one
Worker, 2 cores; ``streamscale.cluster``) and the project's control plane with its node agent
(``streamscale.kube``: etcd, kube-apiserver, controller manager, scheduler, the node agent
running pods as processes). Each run starts one driver per manager in a child process (one
SparkContext per process), the order alternating from run to run so both meet the same noise.
A driver starts with one executor of one core, then ``--repeats`` times asks the actuator for
a second one, as a scale-out does (``SparkActuator.apply(2)``), and times the request to the
executor's registration with the driver (``wait_for(2)``), then gives it back and waits until
it is gone. On Kubernetes the request goes through Spark's pod allocator (a pod created
through the API server, admitted, bound by the scheduler, started by the node agent); on
standalone through the Master, which has the Worker fork the executor. The executors' JVM
and its options are the same on both (``streamscale.kube.entrypoint`` builds the command a
Worker builds).

Printed: per manager the median, lowest and highest start over every scale-out, the ratio
Kubernetes / standalone of the medians, and the load average at the start and the end. What
it does not measure: an image pull (there is no container runtime here), a real kubelet.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

MANAGERS = ("standalone", "kubernetes")
NAMESPACE = "default"
DRIVER = "executor-start"
TOKEN_ENV, CA_ENV = "EXECUTOR_START_TOKEN", "EXECUTOR_START_CA"
"""The drivers' service account on Kubernetes."""


def load() -> str:
    return " ".join(f"{x:.1f}" for x in os.getloadavg())


def child(manager: str, master: str, repeats: int) -> dict[str, Any]:
    """One driver on ``master``: ``repeats`` scale-outs 1 → 2 timed to registration."""
    from streamscale import cluster
    from streamscale.autoscale.actuator import SparkActuator
    from streamscale.autoscale.runtime import AutoscaleOptions, elastic_conf
    from streamscale.network import driver_addresses
    from streamscale.settings import Settings
    from streamscale.spark import session

    memory = "512m"
    conf = {**elastic_conf(master, AutoscaleOptions(min_executors=1, max_executors=2))}
    if manager == "standalone":
        conf.update(cluster.app_conf(master, 2, executor_memory=memory))
        conf.update(driver_addresses(master))
    else:
        conf.update(
            {
                "spark.executor.memory": memory,
                "spark.kubernetes.namespace": NAMESPACE,
                "spark.kubernetes.container.image": "streamscale:local",
                "spark.kubernetes.executor.request.cores": "100m",
                "spark.kubernetes.executor.deleteOnTermination": "true",
                "spark.kubernetes.dynamicAllocation.deleteGracePeriod": "5s",
                "spark.kubernetes.authenticate.oauthToken": os.environ[TOKEN_ENV],
                "spark.kubernetes.authenticate.caCertFile": os.environ[CA_ENV],
                "spark.driver.host": "127.0.0.1",
                "spark.driver.bindAddress": "127.0.0.1",
            }
        )
    settings = Settings(spark_master=master, metrics_port=-1)
    began = time.monotonic()
    spark = session(settings, app_name=f"executor-start-{manager}", extra_conf=conf)
    try:
        actuator = SparkActuator(spark)
        # Standalone starts the application with every executor ``spark.cores.max`` allows
        # (2), Kubernetes with ``spark.executor.instances`` (1): both down to 1 before timing.
        initial = 2 if manager == "standalone" else 1
        actuator.wait_for(initial, 300)
        first = time.monotonic() - began
        actuator.apply(1)
        actuator.wait_for(1, 120, include_removing=True)
        starts: list[float] = []
        for _ in range(repeats):
            actuator.apply(2)
            starts.append(actuator.wait_for(2, 300))
            actuator.apply(1)
            actuator.wait_for(1, 120, include_removing=True)
            time.sleep(2.0)  # the removed executor's process and pod are gone
        return {"manager": manager, "first_s": first, "starts_s": starts}
    finally:
        spark.stop()


def run_child(manager: str, master: str, repeats: int, env: dict[str, str]) -> dict[str, Any]:
    argv = [sys.executable, __file__, "--child", manager, "--master", master]
    argv += ["--repeats", str(repeats)]
    done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=1800)
    lines = [x for x in done.stdout.splitlines() if x.startswith("{")]
    if done.returncode != 0 or not lines:
        raise SystemExit(f"{manager} driver failed: {done.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(lines[-1])
    return result


def driver_token(admin_kubeconfig: Path) -> str:
    """A token of a service account of the namespace bound to the ``edit`` role, what the
    chart's driver runs with (its own Role is narrower): Spark's client then authenticates as
    a pod's driver does. Waits for the namespace's ``default`` account first, which every
    executor pod names and the controller manager makes."""
    from kubernetes import client, config

    api = config.new_client_from_config(str(admin_kubeconfig))
    core = client.CoreV1Api(api)
    deadline = time.monotonic() + 60
    while not any(
        a.metadata.name == "default" for a in core.list_namespaced_service_account(NAMESPACE).items
    ):
        if time.monotonic() > deadline:
            raise SystemExit("no default service account after 60 s")
        time.sleep(0.5)
    core.create_namespaced_service_account(NAMESPACE, {"metadata": {"name": DRIVER}})
    client.RbacAuthorizationV1Api(api).create_namespaced_role_binding(
        NAMESPACE,
        {
            "metadata": {"name": DRIVER},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": "edit",
            },
            "subjects": [{"kind": "ServiceAccount", "name": DRIVER, "namespace": NAMESPACE}],
        },
    )
    answer = core.create_namespaced_service_account_token(
        DRIVER, NAMESPACE, {"spec": {"expirationSeconds": 7200}}
    )
    return str(answer.status.token)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=3, help="scale-outs per driver")
    parser.add_argument("--child", choices=MANAGERS, help=argparse.SUPPRESS)
    parser.add_argument("--master", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.master, args.repeats)), flush=True)
        return

    from streamscale import cluster
    from streamscale.kube import controlplane as cp

    print(f"load average at the start: {load()}", flush=True)
    results: dict[str, list[dict[str, Any]]] = {m: [] for m in MANAGERS}
    with tempfile.TemporaryDirectory(prefix="executor-start-") as tmp:
        base = Path(tmp)
        with (
            cluster.local_cluster(base / "cluster", workers=1, cores=2, memory="2g") as local,
            cp.control_plane(base / "kube") as plane,
        ):
            token = driver_token(plane.admin_kubeconfig)
            masters = {"standalone": local.master_url, "kubernetes": f"k8s://{plane.server}"}
            env = {**os.environ, TOKEN_ENV: token, CA_ENV: str(plane.ca_file)}
            for run in range(args.runs):
                order = MANAGERS if run % 2 == 0 else MANAGERS[::-1]
                for manager in order:
                    got = run_child(manager, masters[manager], args.repeats, env)
                    results[manager].append(got)
                    shown = ", ".join(f"{s:.1f}" for s in got["starts_s"])
                    print(
                        f"run {run + 1} {manager}: executors up {got['first_s']:.1f} s "
                        f"after the session's start; scale-outs {shown} s (load {load()})",
                        flush=True,
                    )
    medians: dict[str, float] = {}
    print(f"\n{'manager':<12} {'scale-outs':>10} {'median s':>9} {'min s':>7} {'max s':>7}")
    for manager in MANAGERS:
        starts = [float(s) for r in results[manager] for s in r["starts_s"]]
        medians[manager] = statistics.median(starts)
        print(
            f"{manager:<12} {len(starts):>10} {medians[manager]:>9.1f} "
            f"{min(starts):>7.1f} {max(starts):>7.1f}"
        )
    ratio = medians["kubernetes"] / medians["standalone"]
    print(f"kubernetes / standalone (medians): {ratio:.2f}; load average at the end: {load()}")
    summary = {"medians_s": medians, "ratio": ratio, "runs": results}
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
