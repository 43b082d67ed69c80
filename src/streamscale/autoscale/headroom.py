"""Whether a session's executor count can move between the autoscaler's bounds, checked once
when :func:`streamscale.attach` starts.

A session that looks right can still be unable to grow: on standalone without
``spark.executor.cores`` the Master gives one executor every free core of a worker, so a
one-worker cluster never starts a second executor, and the autoscaler's requests go unanswered
("requested ... never came"). :func:`headroom` reads the session's settings and, where the
standalone Master reports them, its workers' cores and memory, and says how far the count can
go and, in one line, what to set. :func:`read_master` is the I/O edge that asks the Master.

How standalone grants executors (dynamic allocation off): each executor takes
``spark.executor.cores`` cores and ``spark.executor.memory`` on one worker; the application
holds at most ``spark.cores.max`` cores; without ``spark.executor.cores`` an executor takes
every free core of its worker, one executor per worker.

How Kubernetes does (Spark's ``ExecutorPodsAllocator``): each executor is a pod of its own,
created with a new id on every scale-out, so nothing in the session bounds the count but
``spark.kubernetes.allocation.maximum``, a cap on the pods created over the application's
whole life (a long-running autoscaled stream reaches any finite cap one day); the cluster's
own limits (quotas, nodes) are not visible from the session. Executor pods reach the driver
at ``spark.driver.host``: a loopback address there means no executor ever registers.
"""

from __future__ import annotations

import json
import logging
import os
import re
import time
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from streamscale import cluster
from streamscale.cluster import ClusterStatus, WorkerStatus

log = logging.getLogger(__name__)

__all__ = [
    "DYNAMIC_ALLOCATION_ON",
    "Headroom",
    "MasterReport",
    "headroom",
    "master_urls",
    "read_master",
    "ui_ports",
]

EXECUTOR_CORES = "spark.executor.cores"
CORES_MAX = "spark.cores.max"
EXECUTOR_MEMORY = "spark.executor.memory"
DYNAMIC_ALLOCATION = "spark.dynamicAllocation.enabled"
MASTER_UI_PORT = "spark.master.ui.port"
DRIVER_HOST = "spark.driver.host"
ALLOCATION_MAXIMUM = "spark.kubernetes.allocation.maximum"
DEFAULT_MASTER_UI_PORT = 8080
DEFAULT_EXECUTOR_MEMORY_MB = 1024

DYNAMIC_ALLOCATION_ON = (
    "Spark dynamic allocation is on: set spark.dynamicAllocation.enabled=false "
    "for the autoscaler to drive executors (killExecutors refuses to run with it)"
)


# --------------------------------------------------------------------------- pure parts


@dataclass(frozen=True)
class Headroom:
    """How far the executor count can go, and what stops it.

    ``reachable``: the most executors the cluster manager can ever grant the session (None:
    no limit known). ``available``: how many it can grant now, other applications' cores and
    memory taken (None: not reported). ``message``: one line saying what limits the count and
    what to set (None: nothing to say). ``fatal``: the count cannot move above
    ``min_executors`` (or the session cannot work at all): attach refuses it.
    """

    reachable: int | None = None
    available: int | None = None
    message: str | None = None
    fatal: bool = False

    def bound(self, max_executors: int) -> int:
        """The effective upper bound: ``max_executors``, or lower when the cluster is."""
        return max_executors if self.reachable is None else min(max_executors, self.reachable)


def _positive_int(conf: Mapping[str, str], key: str) -> int | str | None:
    """``conf[key]`` as a whole number >= 1; None when unset; the error line otherwise."""
    raw = conf.get(key)
    if raw is None or not raw.strip():
        return None
    try:
        value = int(raw.strip())
    except ValueError:
        value = 0
    if value < 1:
        return f"{key}={raw} is not a whole number >= 1"
    return value


_SIZE_RE = re.compile(r"^\s*(\d+)\s*([kmgtp]?)b?\s*$")
_MB_PER_UNIT = {"k": 1 / 1024, "m": 1, "g": 1024, "t": 1024**2, "p": 1024**3, "": 1}


def memory_mb(value: str) -> int | None:
    """A Spark memory size (``512m``, ``2g``, ``1024`` = MiB) in MiB; None when unreadable."""
    match = _SIZE_RE.match(value.lower())
    if match is None:
        return None
    return int(int(match.group(1)) * _MB_PER_UNIT[match.group(2)])


def _slots(cores: int, memory: int, executor_cores: int, executor_mb: int | None) -> int:
    """Executors of ``executor_cores`` cores and ``executor_mb`` MiB that fit in a worker."""
    by_cores = max(0, cores) // executor_cores
    if executor_mb is None or executor_mb <= 0:
        return by_cores
    return min(by_cores, max(0, memory) // executor_mb)


def _plural(count: int, word: str) -> str:
    return f"{count} {word}" if count == 1 else f"{count} {word}s"


def _largest_fitting_cores(
    workers: tuple[WorkerStatus, ...], executor_cores: int, executor_mb: int | None, wanted: int
) -> int | None:
    """The largest ``spark.executor.cores`` below ``executor_cores`` for which the workers
    hold ``wanted`` executors; None when none does."""
    for cores in range(executor_cores - 1, 0, -1):
        if sum(_slots(w.cores, w.memory_mb, cores, executor_mb) for w in workers) >= wanted:
            return cores
    return None


def headroom(
    master: str,
    conf: Mapping[str, str],
    min_executors: int,
    max_executors: int,
    report: ClusterStatus | None = None,
    *,
    app_id: str | None = None,
) -> Headroom:
    """Whether the executor count of a session on ``master`` with ``conf`` can reach
    ``max_executors`` (and at least move above ``min_executors``).

    ``report`` is the standalone Master's view (its ``/json/``: workers' cores and memory, the
    applications' cores), used where given; ``app_id`` names this session's own application
    in it, whose cores count as available. Rules:

    - dynamic allocation on: fatal on any cluster manager (the actuator refuses it too);
    - local mode and unknown masters: nothing to say here (attach raises ScalingError later);
    - Kubernetes, YARN: no core limit from the cluster manager; ``spark.executor.cores``, if
      set, must be a whole number >= 1;
    - Kubernetes: ``spark.driver.host`` must not be a loopback address (executor pods could
      never reach the driver), unless the API server is on loopback too (the local cluster
      of ``streamscale kube start``, whose pods are processes of this machine);
      ``spark.kubernetes.allocation.maximum``, when set, bounds the count and is reported,
      since every scale-out spends some of it;
    - standalone: ``spark.executor.cores`` must be set (without it each executor takes a whole
      worker, so the count moves only by workers and its ceiling cannot be read from the
      settings: one worker, the usual new set-up, never grows); ``spark.cores.max`` (when set)
      and the alive workers' cores and memory (when reported) bound the count.

    Fatal when the reachable count is at most ``min_executors`` (and below
    ``max_executors``); a warning, with ``reachable`` the effective bound, when it lies
    between. Fewer executors available now than reachable (other applications hold cores) is
    a warning only: they may release them.
    """
    if conf.get(DYNAMIC_ALLOCATION, "false").strip().lower() == "true" and not master.startswith(
        "local"
    ):
        return Headroom(message=DYNAMIC_ALLOCATION_ON, fatal=True)
    executor_cores = _positive_int(conf, EXECUTOR_CORES)
    if isinstance(executor_cores, str):
        if master.startswith(("spark://", "k8s://", "yarn")):
            return Headroom(message=f"{executor_cores}: set {EXECUTOR_CORES}=1", fatal=True)
        return Headroom()
    if master.startswith("k8s://"):
        return _kubernetes(master, conf, min_executors, max_executors)
    if not master.startswith("spark://"):
        return Headroom()
    return _standalone(conf, executor_cores, min_executors, max_executors, report, app_id)


def is_loopback(host: str) -> bool:
    """Whether ``host`` names this machine's loopback (``127.x.y.z``, ``::1``, localhost)."""
    host = host.strip().strip("[]").lower()
    return host in ("localhost", "::1") or re.fullmatch(r"127(\.\d{1,3}){3}", host) is not None


def _kubernetes(
    master: str, conf: Mapping[str, str], min_executors: int, max_executors: int
) -> Headroom:
    from streamscale.network import master_hosts

    host = conf.get(DRIVER_HOST, "")
    # An API server on loopback is the local one of `streamscale kube start`, whose node
    # agent runs executor pods as processes of this machine: they reach a driver on loopback.
    local_cluster = all(is_loopback(h) for h, _ in master_hosts(master))
    if is_loopback(host) and not local_cluster:
        return Headroom(
            message=f"{DRIVER_HOST}={host.strip()}: executor pods cannot reach a driver on "
            f"loopback; set {DRIVER_HOST} to the driver pod's IP or its headless Service "
            "(the Helm chart in deploy/helm/streamscale sets both)",
            fatal=True,
        )
    maximum = _positive_int(conf, ALLOCATION_MAXIMUM)
    if isinstance(maximum, str):
        return Headroom(message=f"{maximum}: unset {ALLOCATION_MAXIMUM}", fatal=True)
    if maximum is None:
        return Headroom()
    reachable = maximum if maximum < max_executors else None
    fatal = reachable is not None and maximum <= min_executors
    message = (
        f"{ALLOCATION_MAXIMUM}={maximum} caps the executor pods created over the whole "
        "application and every scale-out creates new ones: once it is spent no executor "
        f"is added or replaced; unset {ALLOCATION_MAXIMUM}"
    )
    if fatal:
        message += f" (the executor count cannot move above min_executors={min_executors})"
    return Headroom(reachable, None, message, fatal)


def _standalone(
    conf: Mapping[str, str],
    executor_cores: int | None,
    min_executors: int,
    max_executors: int,
    report: ClusterStatus | None,
    app_id: str | None,
) -> Headroom:
    alive = () if report is None else report.alive_workers
    if executor_cores is None:
        if report is None:
            how = "standalone then gives one executor all the free cores of a worker"
        elif len(alive) == 1:
            how = (
                f"standalone gives one executor all {_plural(alive[0].cores, 'core')} of "
                f"the cluster's only worker, so no second executor can start"
            )
        else:
            how = (
                f"standalone gives one executor all the free cores of a worker, so at most "
                f"{len(alive)} can start (one per alive worker) and the count moves by "
                "whole workers"
            )
        return Headroom(
            message=f"{EXECUTOR_CORES} is unset: {how}; set {EXECUTOR_CORES}=1 "
            f"(and {CORES_MAX} >= {max_executors} for max_executors={max_executors})",
            fatal=True,
        )
    cores_max = _positive_int(conf, CORES_MAX)
    if isinstance(cores_max, str):
        wanted = f"{CORES_MAX}={max_executors * executor_cores}"
        return Headroom(
            message=f"{cores_max}: set {wanted} for max_executors={max_executors}", fatal=True
        )
    executor_mb = memory_mb(conf.get(EXECUTOR_MEMORY, f"{DEFAULT_EXECUTOR_MEMORY_MB}m"))
    c = executor_cores
    needed_max = f"{CORES_MAX}={max_executors * c}"
    caps: list[int] = []
    reasons: list[str] = []
    if cores_max is not None:
        by_conf = cores_max // c
        caps.append(by_conf)
        if by_conf < max_executors:
            reasons.append(
                f"{CORES_MAX}={cores_max} with {EXECUTOR_CORES}={c} allows "
                f"{_plural(by_conf, 'executor')}: set {needed_max} for "
                f"max_executors={max_executors}"
            )
    available: int | None = None
    if report is not None:
        by_cluster = sum(_slots(w.cores, w.memory_mb, c, executor_mb) for w in alive)
        caps.append(by_cluster)
        if by_cluster < max_executors:
            reasons.append(_cluster_reason(alive, c, executor_mb, by_cluster, max_executors))
        own = next((a.cores for a in report.apps if a.id == app_id), 0)
        available = own // c + sum(
            _slots(w.cores - w.cores_used, w.memory_mb - w.memory_used_mb, c, executor_mb)
            for w in alive
        )
        if cores_max is not None:
            available = min(available, cores_max // c)
    reachable = min(caps) if caps else None
    if reachable is not None and reachable < max_executors:
        fatal = reachable <= min_executors
        tail = (
            f"fewer than min_executors={min_executors} can ever start"
            if reachable < min_executors
            else f"the executor count cannot move above min_executors={min_executors}"
            if fatal
            else f"autoscaling up to {_plural(reachable, 'executor')}, "
            f"not max_executors={max_executors}"
        )
        return Headroom(reachable, available, "; ".join([*reasons, tail]), fatal)
    if available is not None and available < min(max_executors, reachable or max_executors):
        used = sum(w.cores_used for w in alive)
        total = sum(w.cores for w in alive)
        message = (
            f"other applications hold cores or memory of the cluster ({used} of {total} cores "
            f"in use): only {_plural(available, 'executor')} of {_plural(c, 'core')} can start "
            f"until they release them, not max_executors={max_executors}"
        )
        return Headroom(reachable, available, message)
    return Headroom(reachable, available)


def _cluster_reason(
    alive: tuple[WorkerStatus, ...],
    executor_cores: int,
    executor_mb: int | None,
    fits: int,
    max_executors: int,
) -> str:
    if not alive:
        return "the standalone master reports no alive worker: start one"
    cores = sum(w.cores for w in alive)
    memory = sum(w.memory_mb for w in alive)
    size = f"{_plural(executor_cores, 'core')}" + (f" and {executor_mb} MiB" if executor_mb else "")
    found = (
        f"the cluster's {_plural(len(alive), 'alive worker')} "
        f"({_plural(cores, 'core')}, {memory} MiB) {'holds' if len(alive) == 1 else 'hold'} "
        f"{_plural(fits, 'executor')} of {size}"
    )
    smaller = _largest_fitting_cores(alive, executor_cores, executor_mb, max_executors)
    by_cores_only = sum(_slots(w.cores, w.memory_mb, executor_cores, None) for w in alive)
    if smaller is not None:
        fix = (
            f"set {EXECUTOR_CORES}={smaller} (and {CORES_MAX}={smaller * max_executors}) "
            f"or add workers"
        )
    elif by_cores_only >= max_executors and executor_mb:
        fix = f"lower {EXECUTOR_MEMORY} or add workers with more memory"
    else:
        fix = f"add workers or lower max_executors to {fits}"
    return f"{found}: {fix}"


# --------------------------------------------------------------------------- I/O edge

MasterReport = Callable[[str, Mapping[str, str]], ClusterStatus | None]
"""Reads the standalone Master's view for a master URL and the session's settings."""


def master_urls(master: str) -> list[str]:
    """The URL of each master of ``spark://h1:p1,h2:p2`` (one unless high availability)."""
    hosts = master.removeprefix("spark://")
    return [f"spark://{h.strip()}" for h in hosts.split(",") if h.strip()]


def local_cluster_ui_port(master: str) -> int | None:
    """The web UI port the project's local cluster recorded (``streamscale cluster start``,
    default data directory) when that cluster is ``master``; None otherwise."""
    try:
        local = cluster.running(cluster.DEFAULT_DATA_DIR)
    except Exception as exc:  # an unreadable record: the other candidates remain
        log.debug("no local cluster record: %s", exc)
        return None
    return (
        local.webui_port if local is not None and local.master_url in master_urls(master) else None
    )


def ui_ports(conf: Mapping[str, str], master: str, local_port: int | None = None) -> list[int]:
    """Where the Master's web UI may listen, in order: ``spark.master.ui.port`` in the
    session's settings, ``SPARK_MASTER_WEBUI_PORT``, ``local_port`` (the project's own
    cluster), then Spark's default 8080."""
    found: list[int] = []
    for raw in (conf.get(MASTER_UI_PORT), os.environ.get("SPARK_MASTER_WEBUI_PORT")):
        if raw is not None and raw.strip().isdigit():
            found.append(int(raw))
    if local_port is not None:
        found.append(local_port)
    found.append(DEFAULT_MASTER_UI_PORT)
    return list(dict.fromkeys(p for p in found if 0 < p < 65536))


def _get_json(url: str, timeout_s: float) -> Any:
    with urllib.request.urlopen(url, timeout=timeout_s) as response:
        return json.loads(response.read().decode())


def read_master(
    master: str,
    conf: Mapping[str, str],
    *,
    timeout_s: float = 2.0,
    get_json: Callable[[str, float], Any] = _get_json,
    local_port: Callable[[str], int | None] = local_cluster_ui_port,
) -> ClusterStatus | None:
    """The standalone Master's ``/json/`` for ``master``, or None (logged at debug level)
    when no candidate port answers as that master within ``timeout_s`` in all.

    Only the master's own host is asked, on the ports of :func:`ui_ports`; an answer counts
    only if it is an ALIVE master whose URL is the session's (not another master, nor a
    standby, nor some other service on 8080).
    """
    urls = master_urls(master)
    deadline = time.monotonic() + timeout_s
    ports = ui_ports(conf, master, local_port(master))
    for url in urls:
        host = urlsplit(url).hostname
        if host is None:
            continue
        netloc = f"[{host}]" if ":" in host else host
        for port in ports:
            left = deadline - time.monotonic()
            if left <= 0:
                log.debug("the standalone master's web UI did not answer in %.1f s", timeout_s)
                return None
            endpoint = f"http://{netloc}:{port}/json/"
            try:
                raw = get_json(endpoint, left)
                if not isinstance(raw, dict) or raw.get("url") not in urls:
                    continue
                if raw.get("status") not in (None, "ALIVE"):
                    continue
                return ClusterStatus.from_json(raw)
            except Exception as exc:  # refused, timed out, not JSON, not a master's JSON
                log.debug("no standalone master report at %s: %s", endpoint, exc)
    log.debug("no standalone master report for %s: cluster check skipped", master)
    return None
