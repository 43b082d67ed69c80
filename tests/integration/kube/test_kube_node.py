"""The control plane and the node agent, for real: a pod is admitted (ServiceAccount
admission), scheduled, run as a local process with its env and its service-account volume,
reported Running; deleted as a kubelet deletes it (SIGTERM, grace, final delete); a
Deployment's pod is made by the controller manager's controllers."""

from __future__ import annotations

import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from kube_io import wait

from streamscale.kube import controlplane as cp

pytestmark = pytest.mark.integration

NAME = "metadata.name"
IP = "status.podIP"
WORK = "/var/lib/streamscale-test/work"


def namespace(core: Any) -> str:
    name = f"t-{uuid.uuid4().hex[:8]}"
    core.create_namespace({"metadata": {"name": name}})
    wait(lambda: _has_sa(core, name), f"the default service account of {name}")
    return name


def _has_sa(core: Any, ns: str) -> bool:
    return any(
        sa.metadata.name == "default" for sa in core.list_namespaced_service_account(ns).items
    )


def pod_dir(kube: cp.ControlPlane, ns: str, name: str) -> Path:
    found = list((kube.data_dir / "pods" / cp.DEFAULT_NODE).glob(f"{ns}_{name}_*"))
    assert len(found) == 1, found
    return found[0]


def test_the_node_registers_with_real_capacity(kube: cp.ControlPlane, core: Any) -> None:
    import os

    node = core.read_node(cp.DEFAULT_NODE)
    assert node.status.capacity["cpu"] == str(os.cpu_count())
    assert node.status.capacity["pods"] == "110"
    ready = [c for c in node.status.conditions if c.type == "Ready"]
    assert ready[0].status == "True"
    assert node.status.addresses[0].address == "127.0.0.1"


def test_a_pod_runs_as_a_process_and_is_deleted_as_a_kubelet_deletes_it(
    kube: cp.ControlPlane, core: Any
) -> None:
    from kubernetes.client.rest import ApiException

    ns = namespace(core)
    script = (
        "trap 'echo got-TERM; exit 3' TERM; "
        "echo name=$POD_NAME ip=$POD_IP host=$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT; "
        "echo ns=$(cat /var/run/secrets/kubernetes.io/serviceaccount/namespace); "
        "test -s /var/run/secrets/kubernetes.io/serviceaccount/token && echo token-ok; "
        "test -s /var/run/secrets/kubernetes.io/serviceaccount/ca.crt && echo ca-ok; "
        "echo pwd=$(pwd); while true; do sleep 0.2; done"
    )
    pod = {
        "metadata": {"name": "p1"},
        "spec": {
            "terminationGracePeriodSeconds": 20,
            "containers": [
                {
                    "name": "main",
                    "image": "streamscale:test",
                    "command": ["sh", "-c", script],
                    "workingDir": WORK,
                    "env": [
                        {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": NAME}}},
                        {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": IP}}},
                    ],
                    "volumeMounts": [{"name": "work", "mountPath": WORK}],
                }
            ],
            "volumes": [{"name": "work", "emptyDir": {}}],
        },
    }
    # Admission: a pod whose service account does not exist is refused.
    with pytest.raises(ApiException) as refused:
        core.create_namespaced_pod(
            ns, {**pod, "spec": {**pod["spec"], "serviceAccountName": "missing"}}
        )
    assert refused.value.status == 403
    core.create_namespaced_pod(ns, pod)
    running = wait(
        lambda: (p := core.read_namespaced_pod("p1", ns)).status.phase == "Running" and p,
        "pod p1 Running",
    )
    assert running.spec.node_name == cp.DEFAULT_NODE
    assert running.status.pod_ip == "127.0.0.1"
    assert running.status.container_statuses[0].ready
    log = pod_dir(kube, ns, "p1") / "main.log"
    wait(lambda: "pwd=" in log.read_text(), "the container's output")
    text = log.read_text()
    assert f"name=p1 ip=127.0.0.1 host=127.0.0.1:{kube.layout.apiserver_port}" in text
    assert f"ns={ns}" in text
    assert "token-ok" in text and "ca-ok" in text
    assert "pwd=/var/lib/streamscale-test/work" in text
    # Deletion: SIGTERM, the container exits (3) within its grace, then the pod is gone.
    started = time.monotonic()
    core.delete_namespaced_pod("p1", ns, grace_period_seconds=20)
    wait(lambda: not core.list_namespaced_pod(ns).items, "pod p1 deleted", timeout_s=60)
    assert time.monotonic() - started < 20
    assert "got-TERM" in log.read_text()


def test_a_deployment_gets_its_pod_through_the_controllers(core: Any) -> None:
    from kubernetes import client

    ns = namespace(core)
    apps = client.AppsV1Api(core.api_client)
    labels = {"app": "sleeper"}
    apps.create_namespaced_deployment(
        ns,
        {
            "metadata": {"name": "sleeper"},
            "spec": {
                "replicas": 2,
                "selector": {"matchLabels": labels},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {
                        "terminationGracePeriodSeconds": 1,
                        "containers": [{"name": "s", "image": "x", "command": ["sleep", "600"]}],
                    },
                },
            },
        },
    )
    wait(
        lambda: (
            (d := apps.read_namespaced_deployment("sleeper", ns)).status.ready_replicas == 2 and d
        ),
        "2 ready replicas",
    )
    apps.delete_namespaced_deployment("sleeper", ns, propagation_policy="Foreground")
    wait(lambda: not core.list_namespaced_pod(ns).items, "the deployment's pods deleted")


def test_a_pod_whose_configmap_comes_later_starts_once_it_exists(core: Any) -> None:
    """Spark creates an executor pod and then its ConfigMap: the agent retries the pod, as a
    kubelet's sync does, instead of leaving it waiting."""
    ns = namespace(core)
    core.create_namespaced_pod(
        ns,
        {
            "metadata": {"name": "late"},
            "spec": {
                "terminationGracePeriodSeconds": 1,
                "containers": [
                    {
                        "name": "c",
                        "image": "x",
                        "command": ["sh", "-c", "cat /conf/k && sleep 600"],
                        "volumeMounts": [{"name": "conf", "mountPath": "/conf"}],
                    }
                ],
                "volumes": [{"name": "conf", "configMap": {"name": "later"}}],
            },
        },
    )

    def waiting_reason() -> str | None:
        statuses = core.read_namespaced_pod("late", ns).status.container_statuses or []
        return statuses[0].state.waiting.reason if statuses and statuses[0].state.waiting else None

    assert wait(waiting_reason, "the pod waiting for its ConfigMap") == "CreateContainerConfigError"
    core.create_namespaced_config_map(ns, {"metadata": {"name": "later"}, "data": {"k": "v"}})
    wait(lambda: core.read_namespaced_pod("late", ns).status.phase == "Running", "Running")
    core.delete_namespaced_pod("late", ns, grace_period_seconds=1)
    wait(lambda: not core.list_namespaced_pod(ns).items, "the pod deleted")
