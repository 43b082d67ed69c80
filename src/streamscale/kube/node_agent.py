"""The node agent: a kubelet's stand-in that runs the pods bound to its Node as local
processes, through the real API server, with the official ``kubernetes`` Python client.

What it does as a kubelet does:

- registers its Node (as ``system:node:NAME``, so the Node authorizer and NodeRestriction
  admission apply to everything it asks) with this machine's real capacity (cores, memory,
  110 pods), its address 127.0.0.1 and a Ready condition, and renews its Lease in
  ``kube-node-lease`` and its Ready heartbeat every :data:`HEARTBEAT_S`;
- watches the pods bound to it (``spec.nodeName``); runs each container's command and args
  (``$(VAR)`` expanded) with its environment (``value``, ``fieldRef`` of the downward API,
  ConfigMap and Secret keys, ``envFrom``) and the service variables
  (``KUBERNETES_SERVICE_HOST=127.0.0.1``, ``KUBERNETES_SERVICE_PORT`` the API server's real
  port), in its ``workingDir``;
- mounts the pod's volumes at their ``mountPath`` in a mount namespace of the pod's own
  (``unshare --mount`` and bind mounts: the host's paths are not changed, except that empty
  mount-point directories are created on it): ``configMap``, ``secret``, ``emptyDir``,
  ``downwardAPI`` and ``projected`` (the service-account token from the TokenRequest API,
  bound to the pod, with ``ca.crt`` and ``namespace``, at
  ``/var/run/secrets/kubernetes.io/serviceaccount`` as the ServiceAccount admission plugin
  asks);
- reports through the status subresource the phase, the pod IP (127.0.0.1), each container's
  state (running; terminated with its exit code; waiting with a reason when its spec cannot
  be honoured) and readiness; restarts containers per ``restartPolicy``;
- honours deletion: SIGTERM to the container's process group, the pod's grace period,
  SIGKILL, the terminated status, then the final delete with grace 0.

What it does not do (and a kubelet does): images (every image is this checkout's install:
its virtualenv on ``PATH``, its source tree on ``PYTHONPATH``, a container without
``command`` runs the project image's
entrypoint, :mod:`.entrypoint`, which stands in for Spark's ``entrypoint.sh``); cgroups (no
CPU or memory limit is enforced: requests count for scheduling only); networking (every pod
shares the host's network namespace: pod IP and host IP are 127.0.0.1, so ports are the
host's; no Service, ClusterIP, DNS or kube-proxy); probes (a running container is ready);
volume types other than those above (a pod with one is reported waiting,
``CreateContainerConfigError``); token refresh (a projected token lives its
``expirationSeconds``, one hour by default); image pulls, exec, logs and port-forward through
the API server (the container's output is in the agent's pod directory).
"""

from __future__ import annotations

import base64
import contextlib
import datetime as dt
import os
import platform
import shlex
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from streamscale.kube import pods
from streamscale.kube.pods import Outcome, PodSpecError

HEARTBEAT_S = 10.0
RETRY_S = 2.0
MAX_PODS = 110
KUBELET_VERSION = "v1.36.3"
SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"


def now() -> str:
    """RFC 3339 in UTC, as the API's ``Time`` fields take it."""
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def micro_now() -> str:
    """RFC 3339 with microseconds, as the API's ``MicroTime`` fields (a Lease's) take it."""
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def memory_kib() -> int:
    """This machine's memory in KiB (``/proc/meminfo``)."""
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemTotal:"):
                return int(line.split()[1])
    raise OSError("no MemTotal in /proc/meminfo")


def image_entrypoint() -> list[str]:
    """The project image's entrypoint: :mod:`streamscale.kube.entrypoint` in this Python."""
    return [sys.executable, "-m", "streamscale.kube.entrypoint"]


def image_env() -> dict[str, str]:
    """The environment the project's image sets (deploy/docker/Dockerfile): its virtualenv
    first on ``PATH``, ``PYSPARK_PYTHON`` that Python; and ``JAVA_HOME`` if this host has one.
    ``PYTHONPATH``: the source tree of the ``streamscale`` package this agent runs, so that
    its pods run the same checkout (the virtualenv may have another installed)."""
    venv_bin = str(Path(sys.executable).parent)
    env = {
        "PATH": f"{venv_bin}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        "PYTHONPATH": str(Path(__file__).resolve().parents[2]),
        "PYSPARK_PYTHON": sys.executable,
        "LANG": "C.UTF-8",
    }
    if "JAVA_HOME" in os.environ:
        env["JAVA_HOME"] = os.environ["JAVA_HOME"]
    return env


@dataclass
class Container:
    """One container's process and what is known of it."""

    name: str
    image: str
    proc: subprocess.Popen[bytes] | None = None
    started_at: str | None = None
    outcome: Outcome | None = None
    restarts: int = 0
    waiting: tuple[str, str] | None = None


@dataclass
class Pod:
    """A pod this agent runs: its spec as last seen, its directory and containers."""

    uid: str
    namespace: str
    name: str
    raw: dict[str, Any]
    directory: Path
    containers: list[Container] = field(default_factory=list)
    deleting: bool = False
    finished: bool = False
    tried_at: float = 0.0


class NodeAgent:
    """Registers node ``name`` and runs the pods bound to it (see the module's docstring).

    ``api_client``: a ``kubernetes.client.ApiClient`` authenticated as ``system:node:NAME``;
    ``apiserver_port``: the port pods reach the API server at on 127.0.0.1; ``pods_dir``: where
    each pod's volumes, working directories and container logs go."""

    def __init__(self, api_client: Any, name: str, apiserver_port: int, pods_dir: Path) -> None:
        from kubernetes import client

        self.api_client = api_client
        self.core = client.CoreV1Api(api_client)
        self.coordination = client.CoordinationV1Api(api_client)
        self.name = name
        self.apiserver_port = apiserver_port
        self.pods_dir = pods_dir
        self.pods: dict[str, Pod] = {}
        self.lock = threading.RLock()
        self.stopping = threading.Event()

    # ------------------------------------------------------------------ the node

    def node_status(self) -> dict[str, Any]:
        capacity = {
            "cpu": str(os.cpu_count() or 1),
            "memory": f"{memory_kib()}Ki",
            "pods": str(MAX_PODS),
            "ephemeral-storage": "100Gi",
        }
        stamp = now()
        return {
            "capacity": capacity,
            "allocatable": capacity,
            "addresses": [
                {"type": "InternalIP", "address": pods.POD_IP},
                {"type": "Hostname", "address": self.name},
            ],
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True",
                    "reason": "KubeletReady",
                    "message": "streamscale node agent is posting ready status",
                    "lastHeartbeatTime": stamp,
                    "lastTransitionTime": stamp,
                }
            ],
            "nodeInfo": {
                "machineID": self.name,
                "systemUUID": self.name,
                "bootID": self.name,
                "kernelVersion": platform.release(),
                "osImage": "streamscale node agent",
                "containerRuntimeVersion": "process://0.1.0",
                "kubeletVersion": KUBELET_VERSION,
                "kubeProxyVersion": "",
                "operatingSystem": "linux",
                "architecture": "amd64",
            },
        }

    def register(self) -> None:
        """Create the Node (or take over an existing one of that name) and post its status."""
        from kubernetes.client.rest import ApiException

        body = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": self.name,
                "labels": {
                    "kubernetes.io/hostname": self.name,
                    "kubernetes.io/os": "linux",
                    "kubernetes.io/arch": "amd64",
                },
            },
        }
        try:
            self.core.create_node(body)
        except ApiException as exc:
            if exc.status != 409:
                raise
        self.core.patch_node_status(self.name, {"status": self.node_status()})
        self.renew_lease()

    def renew_lease(self) -> None:
        from kubernetes.client.rest import ApiException

        spec = {
            "holderIdentity": self.name,
            "leaseDurationSeconds": 40,
            "renewTime": micro_now(),
        }
        try:
            self.coordination.patch_namespaced_lease(self.name, "kube-node-lease", {"spec": spec})
        except ApiException as exc:
            if exc.status != 404:
                raise
            node = self.core.read_node(self.name)
            self.coordination.create_namespaced_lease(
                "kube-node-lease",
                {
                    "metadata": {
                        "name": self.name,
                        "ownerReferences": [
                            {
                                "apiVersion": "v1",
                                "kind": "Node",
                                "name": self.name,
                                "uid": node.metadata.uid,
                            }
                        ],
                    },
                    "spec": spec,
                },
            )

    def heartbeat_loop(self) -> None:
        while not self.stopping.wait(HEARTBEAT_S):
            with contextlib.suppress(Exception):
                self.renew_lease()
                stamp = now()
                self.core.patch_node_status(
                    self.name,
                    {
                        "status": {
                            "conditions": [
                                {"type": "Ready", "status": "True", "lastHeartbeatTime": stamp}
                            ]
                        }
                    },
                )

    # ------------------------------------------------------------------ pods

    def watch_loop(self) -> None:
        """Watch the pods bound to this node and reconcile each event; re-list on expiry."""
        from kubernetes import watch

        selector = f"spec.nodeName={self.name}"
        while not self.stopping.is_set():
            try:
                listed = self.core.list_pod_for_all_namespaces(field_selector=selector)
                for item in listed.items:
                    self.reconcile(self.api_client.sanitize_for_serialization(item))
                w = watch.Watch()
                for event in w.stream(
                    self.core.list_pod_for_all_namespaces,
                    field_selector=selector,
                    resource_version=listed.metadata.resource_version,
                    timeout_seconds=60,
                ):
                    if self.stopping.is_set():
                        w.stop()
                        break
                    raw = self.api_client.sanitize_for_serialization(event["object"])
                    if event["type"] == "DELETED":
                        self.forget(raw["metadata"]["uid"])
                    else:
                        self.reconcile(raw)
            except Exception as exc:  # a broken watch: log, wait, list again
                print(f"node agent: watch failed ({exc}); listing again", flush=True)
                self.stopping.wait(1.0)

    def reconcile(self, raw: dict[str, Any]) -> None:
        meta = raw["metadata"]
        uid = meta["uid"]
        with self.lock:
            pod = self.pods.get(uid)
            if pod is None:
                if raw.get("status", {}).get("phase") in ("Succeeded", "Failed"):
                    if meta.get("deletionTimestamp"):
                        self.final_delete(meta["namespace"], meta["name"], uid)
                    return
                pod = Pod(
                    uid,
                    meta["namespace"],
                    meta["name"],
                    raw,
                    self.pods_dir / f"{meta['namespace']}_{meta['name']}_{uid[:8]}",
                )
                self.pods[uid] = pod
                if not meta.get("deletionTimestamp"):
                    self.start_pod(pod)
            pod.raw = raw
            if meta.get("deletionTimestamp") and not pod.deleting:
                pod.deleting = True
                grace = int(meta.get("deletionGracePeriodSeconds") or 0)
                threading.Thread(
                    target=self.terminate, args=(pod, grace), daemon=True, name=f"kill-{uid[:8]}"
                ).start()

    def forget(self, uid: str) -> None:
        with self.lock:
            pod = self.pods.pop(uid, None)
        if pod is not None:
            for c in pod.containers:
                if c.proc is not None and c.proc.poll() is None:
                    kill_group(c.proc, signal.SIGKILL)

    def base_env(self, pod: Pod) -> dict[str, str]:
        port = str(self.apiserver_port)
        return {
            **image_env(),
            "HOME": str(pod.directory / "home"),
            "HOSTNAME": pod.name,
            "KUBERNETES_SERVICE_HOST": pods.POD_IP,
            "KUBERNETES_SERVICE_PORT": port,
            "KUBERNETES_SERVICE_PORT_HTTPS": port,
            "KUBERNETES_PORT": f"tcp://{pods.POD_IP}:{port}",
            "KUBERNETES_PORT_443_TCP": f"tcp://{pods.POD_IP}:{port}",
            "KUBERNETES_PORT_443_TCP_ADDR": pods.POD_IP,
            "KUBERNETES_PORT_443_TCP_PORT": port,
            "KUBERNETES_PORT_443_TCP_PROTO": "tcp",
        }

    def lookup(self, namespace: str, kind: str, name: str, key: str) -> str | None:
        values = self.list_keys(namespace, kind, name)
        return None if values is None else values.get(key)

    def list_keys(self, namespace: str, kind: str, name: str) -> dict[str, str] | None:
        from kubernetes.client.rest import ApiException

        try:
            if kind == "configmap":
                cm = self.core.read_namespaced_config_map(name, namespace)
                return dict(cm.data or {})
            secret = self.core.read_namespaced_secret(name, namespace)
            return {k: base64.b64decode(v).decode() for k, v in (secret.data or {}).items()}
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def write_volumes(self, pod: Pod) -> dict[str, Path]:
        """Each volume's content in the pod's directory; volume name → its directory."""
        found: dict[str, Path] = {}
        spec = pod.raw["spec"]
        for volume in spec.get("volumes", []) or []:
            name = volume["name"]
            target = pod.directory / "volumes" / name
            target.mkdir(parents=True, exist_ok=True)
            if "emptyDir" in volume:
                pass
            elif "configMap" in volume or "secret" in volume:
                kind = "configmap" if "configMap" in volume else "secret"
                source = volume.get("configMap") or volume["secret"]
                ref = source.get("name") or source.get("secretName")
                self.write_keys(pod, target, kind, ref, source.get("items"), source)
            elif "downwardAPI" in volume:
                for item in volume["downwardAPI"].get("items", []):
                    (target / item["path"]).write_text(
                        pods.field_value(pod.raw, item["fieldRef"]["fieldPath"])
                    )
            elif "projected" in volume:
                for source in volume["projected"].get("sources", []):
                    self.write_projection(pod, target, source)
            else:
                kinds = sorted(k for k in volume if k != "name")
                raise PodSpecError(f"volume {name!r}: {kinds} is not supported by the node agent")
            found[name] = target
        return found

    def write_keys(
        self,
        pod: Pod,
        target: Path,
        kind: str,
        ref: str,
        items: list[dict[str, Any]] | None,
        source: Mapping[str, Any],
    ) -> None:
        values = self.list_keys(pod.namespace, kind, ref)
        if values is None:
            if source.get("optional"):
                return
            raise PodSpecError(f"{kind} {ref!r} not found in {pod.namespace}")
        chosen = (
            {i["path"]: values[i["key"]] for i in items if i["key"] in values} if items else values
        )
        for path, value in chosen.items():
            out = target / path
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text(value)

    def write_projection(self, pod: Pod, target: Path, source: Mapping[str, Any]) -> None:
        if "serviceAccountToken" in source:
            token = source["serviceAccountToken"]
            spec: dict[str, Any] = {
                "expirationSeconds": int(token.get("expirationSeconds", 3600)),
                "boundObjectRef": {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "name": pod.name,
                    "uid": pod.uid,
                },
            }
            if token.get("audience"):
                spec["audiences"] = [token["audience"]]
            answer = self.core.create_namespaced_service_account_token(
                pod.raw["spec"].get("serviceAccountName", "default"),
                pod.namespace,
                {"spec": spec},
            )
            (target / token["path"]).write_text(answer.status.token)
        elif "configMap" in source or "secret" in source:
            kind = "configmap" if "configMap" in source else "secret"
            ref = source.get("configMap") or source["secret"]
            self.write_keys(pod, target, kind, ref["name"], ref.get("items"), ref)
        elif "downwardAPI" in source:
            for item in source["downwardAPI"].get("items", []):
                (target / item["path"]).write_text(
                    pods.field_value(pod.raw, item["fieldRef"]["fieldPath"])
                )
        else:
            raise PodSpecError(f"projected source {sorted(source)} is not supported")

    def start_pod(self, pod: Pod) -> None:
        """Write the volumes, start every container, report Running (or why not)."""
        pod.tried_at = time.monotonic()
        pod.directory.mkdir(parents=True, exist_ok=True)
        (pod.directory / "home").mkdir(exist_ok=True)
        spec = pod.raw["spec"]
        pod.containers = [Container(c["name"], c.get("image", "")) for c in spec["containers"]]
        try:
            volumes = self.write_volumes(pod)
            for container, c_spec in zip(pod.containers, spec["containers"], strict=True):
                self.launch(pod, container, c_spec, volumes)
        except PodSpecError as exc:
            for container in pod.containers:
                if container.proc is None:
                    container.waiting = ("CreateContainerConfigError", str(exc))
        except Exception as exc:
            for container in pod.containers:
                if container.proc is None:
                    container.waiting = ("RunContainerError", str(exc)[:500])
        self.report(pod)

    def launch(
        self, pod: Pod, container: Container, c_spec: Mapping[str, Any], volumes: Mapping[str, Path]
    ) -> None:
        ns = pod.namespace
        env = pods.container_env(
            pod.raw,
            c_spec,
            self.base_env(pod),
            lambda kind, name, key: self.lookup(ns, kind, name, key),
            lambda kind, name: self.list_keys(ns, kind, name),
        )
        argv = pods.container_argv(c_spec, env, image_entrypoint())
        mounts = []
        for mount in c_spec.get("volumeMounts", []) or []:
            source = volumes.get(mount["name"])
            if source is None:
                raise PodSpecError(f"volumeMount {mount['name']!r}: no such volume")
            if mount.get("subPath"):
                source = source / mount["subPath"]
            mounts.append((source, mount["mountPath"], bool(mount.get("readOnly"))))
        workdir = c_spec.get("workingDir") or str(pod.directory / "home")
        script = ["set -e"]
        for source, path, read_only in mounts:
            script.append(f"mkdir -p {shlex.quote(path)}")
            script.append(f"mount --bind {shlex.quote(str(source))} {shlex.quote(path)}")
            if read_only:
                script.append(f"mount -o remount,bind,ro {shlex.quote(path)}")
        script += [f"mkdir -p {shlex.quote(workdir)}", f"cd {shlex.quote(workdir)}", 'exec "$@"']
        wrapped = [
            "unshare",
            "--mount",
            "--propagation",
            "private",
            "--",
            "/bin/sh",
            "-c",
            "\n".join(script),
            container.name,
            *argv,
        ]
        log = pod.directory / f"{container.name}.log"
        with open(log, "ab") as out:
            container.proc = subprocess.Popen(
                wrapped,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=env,
                start_new_session=True,
            )
        container.started_at = now()
        container.outcome = None
        container.waiting = None

    def report(self, pod: Pod) -> None:
        """Post the pod's status (phase, IPs, container states, conditions)."""
        from kubernetes.client.rest import ApiException

        spec = pod.raw["spec"]
        outcomes = [c.outcome if c.proc is not None else None for c in pod.containers]
        if any(c.waiting is not None for c in pod.containers):
            phase = "Pending"
        else:
            phase = pods.phase(spec.get("restartPolicy", "Always"), outcomes, pod.deleting)
        statuses = [
            pods.container_status(
                c.name, c.image, pod.uid, c.restarts, c.started_at, c.outcome, c.waiting
            )
            for c in pod.containers
        ]
        ready = phase == "Running" and all(s["ready"] for s in statuses)
        stamp = now()
        status = {
            "phase": phase,
            "hostIP": pods.POD_IP,
            "hostIPs": [{"ip": pods.POD_IP}],
            "podIP": pods.POD_IP,
            "podIPs": [{"ip": pods.POD_IP}],
            "startTime": pod.raw.get("status", {}).get("startTime") or stamp,
            "containerStatuses": statuses,
            "conditions": pods.pod_conditions(ready, stamp),
        }
        pod.finished = phase in ("Succeeded", "Failed")
        try:
            self.core.patch_namespaced_pod_status(pod.name, pod.namespace, {"status": status})
        except ApiException as exc:
            if exc.status not in (404, 409):
                raise

    def monitor_loop(self) -> None:
        """Notice containers that exit; restart them per ``restartPolicy``; retry pods whose
        spec could not be honoured yet (a ConfigMap created after its pod, as Spark creates
        its executors' one), as a kubelet's sync does; report."""
        while not self.stopping.wait(0.5):
            with self.lock:
                current = list(self.pods.values())
            for pod in current:
                waiting = [c for c in pod.containers if c.waiting is not None]
                if (
                    waiting
                    and not pod.deleting
                    and all(c.proc is None for c in pod.containers)
                    and time.monotonic() - pod.tried_at > RETRY_S
                ):
                    with self.lock, contextlib.suppress(Exception):
                        pod.tried_at = time.monotonic()
                        self.start_pod(pod)
                    continue
                changed = False
                for c in pod.containers:
                    if c.proc is None or c.outcome is not None:
                        continue
                    code = c.proc.poll()
                    if code is None:
                        continue
                    code = 128 - code if code < 0 else code  # -SIG → 128 + SIG
                    c.outcome = Outcome(code, c.started_at or now(), now())
                    changed = True
                if not changed:
                    continue
                policy = pod.raw["spec"].get("restartPolicy", "Always")
                if not pod.deleting and not self.stopping.is_set():
                    for c, c_spec in zip(
                        pod.containers, pod.raw["spec"]["containers"], strict=True
                    ):
                        if c.outcome is not None and (
                            policy == "Always" or (policy == "OnFailure" and c.outcome.exit_code)
                        ):
                            with contextlib.suppress(Exception):
                                self.report(pod)
                            time.sleep(min(10.0, 1.0 * (c.restarts + 1)))
                            c.restarts += 1
                            with contextlib.suppress(Exception):
                                self.launch(pod, c, c_spec, self.write_volumes(pod))
                with contextlib.suppress(Exception):
                    self.report(pod)

    def terminate(self, pod: Pod, grace_s: int) -> None:
        """Deletion as a kubelet honours it: SIGTERM, up to ``grace_s``, SIGKILL, the final
        status, then the delete with grace 0 that removes the pod."""
        live = [c.proc for c in pod.containers if c.proc is not None and c.proc.poll() is None]
        for proc in live:
            kill_group(proc, signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline and any(p.poll() is None for p in live):
            time.sleep(0.1)
        for proc in live:
            if proc.poll() is None:
                kill_group(proc, signal.SIGKILL)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(timeout=10)
        for c in pod.containers:
            if c.proc is not None and c.outcome is None:
                code = c.proc.poll()
                code = 137 if code is None else (128 - code if code < 0 else code)
                c.outcome = Outcome(code, c.started_at or now(), now())
        with contextlib.suppress(Exception):
            self.report(pod)
        self.final_delete(pod.namespace, pod.name, pod.uid)
        with self.lock:
            self.pods.pop(pod.uid, None)

    def final_delete(self, namespace: str, name: str, uid: str) -> None:
        from kubernetes.client.rest import ApiException

        try:
            self.core.delete_namespaced_pod(
                name,
                namespace,
                body={"gracePeriodSeconds": 0, "preconditions": {"uid": uid}},
            )
        except ApiException as exc:
            if exc.status not in (404, 409):
                raise

    # ------------------------------------------------------------------ run

    def run(self) -> None:
        """Register, then heartbeat, watch and monitor until SIGTERM; then stop every pod's
        processes (SIGTERM, 10 s, SIGKILL) and exit."""
        self.pods_dir.mkdir(parents=True, exist_ok=True)
        self.register()
        signal.signal(signal.SIGTERM, lambda *_: self.stopping.set())
        signal.signal(signal.SIGINT, lambda *_: self.stopping.set())
        threads = [
            threading.Thread(target=self.heartbeat_loop, daemon=True, name="heartbeat"),
            threading.Thread(target=self.watch_loop, daemon=True, name="watch"),
            threading.Thread(target=self.monitor_loop, daemon=True, name="monitor"),
        ]
        for t in threads:
            t.start()
        print(f"node agent: node {self.name} registered", flush=True)
        self.stopping.wait()
        with self.lock:
            live = [
                c.proc
                for p in self.pods.values()
                for c in p.containers
                if c.proc is not None and c.proc.poll() is None
            ]
        for proc in live:
            kill_group(proc, signal.SIGTERM)
        deadline = time.monotonic() + 10.0
        while time.monotonic() < deadline and any(p.poll() is None for p in live):
            time.sleep(0.1)
        for proc in live:
            if proc.poll() is None:
                kill_group(proc, signal.SIGKILL)


def kill_group(proc: subprocess.Popen[bytes], sig: int) -> None:
    """Signal a container's process group (its process started a session of its own)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, sig)


def main(argv: list[str] | None = None) -> None:
    """``python -m streamscale.kube.node_agent KUBECONFIG NAME APISERVER_PORT PODS_DIR``: the
    agent as its own process (how :mod:`.controlplane` and the tests start it)."""
    from kubernetes import config

    args = sys.argv[1:] if argv is None else argv
    if len(args) != 4:
        raise SystemExit("usage: python -m streamscale.kube.node_agent KUBECONFIG NAME PORT DIR")
    kubeconfig, name, port, pods_dir = args
    api = config.new_client_from_config(kubeconfig)
    NodeAgent(api, name, int(port), Path(pods_dir)).run()


if __name__ == "__main__":
    main()
