"""Pure parts of the node agent (:mod:`.node_agent`): what a kubelet computes from a pod's spec
before and after it runs a container, on plain dicts as the API server serves them (camelCase
JSON), with no I/O.

- :func:`expand`: Kubernetes' ``$(VAR)`` references in env values, commands and args;
- :func:`field_value`: a ``fieldRef`` of the downward API (``metadata.name``,
  ``status.podIP``...) for a pod on this agent's host;
- :func:`container_env`: a container's environment in the order Kubernetes builds it;
- :func:`container_argv`: the command a container runs, for the project's image;
- :func:`phase`, :func:`container_status`, :func:`pod_conditions`: what is reported back.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from streamscale.errors import ConfigError

POD_IP = "127.0.0.1"
"""Every pod's IP, and the host's: pods run as processes in the host's network namespace."""

_REF = re.compile(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)")


class PodSpecError(ConfigError):
    """A pod asks for something the node agent cannot give (an unsupported volume or env
    source, a missing key); the message names it."""


def expand(text: str, env: Mapping[str, str]) -> str:
    """Kubernetes' expansion: ``$(VAR)`` becomes VAR's value when VAR is defined, and stays
    as written otherwise; ``$$`` escapes a ``$``."""

    def one(match: re.Match[str]) -> str:
        if match.group(0) == "$$":
            return "$"
        name = match.group(1)
        return env[name] if name in env else match.group(0)

    return _REF.sub(one, text)


def field_value(pod: Mapping[str, Any], path: str, host_ip: str = POD_IP) -> str:
    """The value of the downward API's ``fieldRef.fieldPath`` ``path`` for ``pod``."""
    meta = pod.get("metadata", {})
    spec = pod.get("spec", {})
    simple = {
        "metadata.name": meta.get("name", ""),
        "metadata.namespace": meta.get("namespace", ""),
        "metadata.uid": meta.get("uid", ""),
        "spec.nodeName": spec.get("nodeName", ""),
        "spec.serviceAccountName": spec.get("serviceAccountName", ""),
        "status.hostIP": host_ip,
        "status.hostIPs": host_ip,
        "status.podIP": POD_IP,
        "status.podIPs": POD_IP,
    }
    if path in simple:
        return str(simple[path])
    keyed = re.fullmatch(r"metadata\.(labels|annotations)\['([^']+)'\]", path)
    if keyed:
        return str(meta.get(keyed.group(1), {}).get(keyed.group(2), ""))
    raise PodSpecError(f"fieldRef {path!r} is not supported by the node agent")


Lookup = Callable[[str, str, str], str | None]
"""(kind ``configmap``/``secret``, name, key) → the value, None when absent."""


def container_env(
    pod: Mapping[str, Any],
    container: Mapping[str, Any],
    base: Mapping[str, str],
    lookup: Lookup,
    list_keys: Callable[[str, str], Mapping[str, str] | None],
) -> dict[str, str]:
    """The container's environment: ``base`` (the image's and the service variables), then
    ``envFrom`` sources, then ``env`` in order, each value expanded against what precedes it
    (a later duplicate wins, as in a container). ``list_keys(kind, name)``: every key of a
    ConfigMap or Secret, None when absent."""
    env = dict(base)
    for source in container.get("envFrom", []) or []:
        for kind, field in (("configmap", "configMapRef"), ("secret", "secretRef")):
            ref = source.get(field)
            if ref is None:
                continue
            values = list_keys(kind, ref["name"])
            if values is None:
                if ref.get("optional"):
                    continue
                raise PodSpecError(f"envFrom: {kind} {ref['name']!r} not found")
            prefix = source.get("prefix", "")
            env.update({prefix + k: v for k, v in values.items()})
    for item in container.get("env", []) or []:
        name = item["name"]
        if "valueFrom" not in item:
            env[name] = expand(item.get("value", ""), env)
            continue
        source = item["valueFrom"]
        if "fieldRef" in source:
            env[name] = field_value(pod, source["fieldRef"]["fieldPath"])
            continue
        for kind, field in (("configmap", "configMapKeyRef"), ("secret", "secretKeyRef")):
            if field in source:
                ref = source[field]
                value = lookup(kind, ref["name"], ref["key"])
                if value is None:
                    if ref.get("optional"):
                        break
                    raise PodSpecError(f"env {name}: key {ref['key']!r} of {kind} {ref['name']!r}")
                env[name] = value
                break
        else:
            raise PodSpecError(f"env {name}: valueFrom {sorted(source)} is not supported")
    return env


def container_argv(
    container: Mapping[str, Any], env: Mapping[str, str], entrypoint: Sequence[str]
) -> list[str]:
    """What the container runs: its ``command`` and ``args``, else the image's ``entrypoint``
    with the container's ``args`` (the project's image has one entrypoint: Spark's executor
    and driver branches), every ``$(VAR)`` expanded."""
    command = [expand(c, env) for c in container.get("command", []) or []]
    args = [expand(a, env) for a in container.get("args", []) or []]
    return (command or list(entrypoint)) + args


@dataclass(frozen=True)
class Outcome:
    """How a container's process ended: its exit code (128 + the signal if killed)."""

    exit_code: int
    started_at: str
    finished_at: str

    @property
    def reason(self) -> str:
        return "Completed" if self.exit_code == 0 else "Error"


def phase(restart_policy: str, outcomes: Sequence[Outcome | None], deleted: bool) -> str:
    """The pod phase: Running while a container runs (or will be restarted), else Succeeded
    when all exited 0, else Failed. A pod being deleted is never restarted."""
    if any(o is None for o in outcomes):
        return "Running"
    codes = [o.exit_code for o in outcomes if o is not None]
    if not deleted and (
        restart_policy == "Always" or (restart_policy == "OnFailure" and any(codes))
    ):
        return "Running"
    return "Succeeded" if all(c == 0 for c in codes) else "Failed"


def container_status(
    name: str,
    image: str,
    pod_uid: str,
    restart_count: int,
    started_at: str | None,
    outcome: Outcome | None,
    waiting: tuple[str, str] | None = None,
) -> dict[str, Any]:
    """One entry of ``status.containerStatuses``: running (and ready: no probes run here),
    terminated with its exit code, or waiting with a reason and message."""
    state: dict[str, Any]
    if waiting is not None:
        state = {"waiting": {"reason": waiting[0], "message": waiting[1]}}
    elif outcome is not None:
        state = {
            "terminated": {
                "exitCode": outcome.exit_code,
                "reason": outcome.reason,
                "startedAt": outcome.started_at,
                "finishedAt": outcome.finished_at,
            }
        }
    else:
        state = {"running": {"startedAt": started_at}}
    running = "running" in state
    return {
        "name": name,
        "image": image,
        "imageID": f"streamscale-node-agent://{image}",
        "containerID": f"process://{pod_uid}/{name}",
        "restartCount": restart_count,
        "ready": running,
        "started": running,
        "state": state,
    }


def pod_conditions(ready: bool, now: str) -> list[dict[str, str]]:
    """The pod's conditions as a kubelet reports them (no init containers here)."""
    value = "True" if ready else "False"
    return [
        {"type": "PodReadyToStartContainers", "status": "True", "lastTransitionTime": now},
        {"type": "Initialized", "status": "True", "lastTransitionTime": now},
        {"type": "ContainersReady", "status": value, "lastTransitionTime": now},
        {"type": "Ready", "status": value, "lastTransitionTime": now},
    ]
