"""Scenarios on hosts of their own (:mod:`cluster_hosts`): the enrichment pipeline with the
autoscaler, its driver on a host of its own, its executors on two remote Workers, its topics
on three brokers. Shared by the multi-host tests (short runs) and ``benchmarks/faults.py
--hosts`` (long runs).

One driver serves every scenario (:class:`Driver`: ``enrichment_proc.py --autoscale`` in the
driver's namespace, as ``streamscale run --autoscale`` runs, through the library; its address
found by the route to the master, nothing set). Each scenario sends a load of its own, with
keys of its own, and ends with a reconciliation of those keys read from the topics
(:func:`spark_scenarios.phase_result`: input = output + dead letters, duplicates counted and
located in the micro-batches in flight at the fault):

- :func:`autoscale`: a burst of purchases; the autoscaler adds an executor on a remote worker
  and removes it once the backlog is gone;
- :func:`worker_partition`: the host of the executor running a task of the batch in flight
  is cut off (its link down) and restored; the Master replaces the lost executor on the other
  host, and the autoscaler's decision log names it lost (with Spark's reason), then shows the
  count back at its target;
- :func:`broker_partition`: the brokers' leader of every partition cut off from the two other
  brokers (still reached by clients) and healed; acks=all with min ISR 2 acknowledges nothing
  the isolated leader alone holds;
- :func:`worker_lost`: with two executors running, one host lost for good (link down, its
  processes SIGKILLed); the count comes back on the other host.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cluster_hosts import DRIVER_CONF, KAFKA_HOSTS, WORKERS, Hosts
from scenarios import (
    FaultResult,
    InFlight,
    Load,
    PipelineProcess,
    ScenarioError,
    caught_up,
    create_topics,
    in_sync,
    load_referential,
    wait_until,
)
from spark_scenarios import Topics, ask, phase_result

from streamscale import processes
from streamscale.kafka.admin import KafkaAdmin

MIN_EXECUTORS, MAX_EXECUTORS = 1, 2
LAG_THRESHOLD = 1_000
"""The lag policy's records of lag per executor: a burst of a few thousand asks for two."""
PRODUCTS = 1_000
UNKNOWN_HOST = "?"
"""An executor registered whose address the status store does not list yet."""


@dataclass
class Driver:
    """The pipeline's driver on the driver's host, and what the scenarios read of it."""

    hosts: Hosts
    process: PipelineProcess
    names: dict[str, str]
    checkpoint: Path
    decision_log: Path
    started: float = field(default_factory=time.monotonic)

    def decisions(self) -> list[dict[str, Any]]:
        if not self.decision_log.exists():
            return []
        return [json.loads(line) for line in self.decision_log.read_text().splitlines()]

    def executor_hosts(self) -> dict[str, str]:
        """Executor id -> host name, as the driver sees them."""
        line = ask(self.process, "executor-hosts", "hosts ", 60)
        found = {}
        for item in line.split()[1:]:
            if "@" in item:
                executor, address = item.split("@", 1)
                found[executor] = self.hosts.host_of(address) if address else UNKNOWN_HOST
        return found

    def wait_hosts(self, count: int, timeout_s: float, avoid: str | None = None) -> dict[str, str]:
        """Until ``count`` executors run (none on ``avoid``), each with its host known (an
        executor registers before the status store lists its address); their hosts."""
        seen: dict[str, str] = {}

        def ready() -> bool:
            nonlocal seen
            if not self.process.alive:
                return True
            seen = self.executor_hosts()
            known = UNKNOWN_HOST not in seen.values()
            return len(seen) == count and known and avoid not in seen.values()

        wait_until(f"{count} executor(s)", ready, timeout_s, step_s=1.0)
        return seen

    def wait_settled(self, count: int, timeout_s: float) -> dict[str, str]:
        """Until ``count`` executors run and a control step taken since the call wants no other
        count and waits for none: executors alone can be at ``count`` while a scale-up decided
        by the scenario before is still pending. Their hosts."""
        since = len(self.decisions())
        deadline = time.monotonic() + timeout_s

        def settled() -> bool:
            steps = self.decisions()[since:]
            wants = bool(steps) and (steps[-1]["desired"], steps[-1]["pending"]) == (count, 0)
            return wants or not self.process.alive

        wait_until(f"a control step settled at {count} executor(s)", settled, timeout_s)
        return self.wait_hosts(count, max(1.0, deadline - time.monotonic()))


def start_driver(
    hosts: Hosts, *, task_delay_ms: int, max_offsets: int, window_s: float, timeout_s: float
) -> Driver:
    """Topics (RF 3, min ISR 2, led by broker 1), the referential, then the driver."""
    bootstrap = hosts.bootstrap
    prefix = f"mh-{uuid.uuid4().hex[:6]}"
    names = create_topics(bootstrap, prefix, 3)
    load_referential(bootstrap, names["referential"], PRODUCTS, seed=41)
    checkpoint = hosts.workdir / f"{prefix}-checkpoint"
    decision_log = hosts.workdir / f"{prefix}-decisions.jsonl"
    process = PipelineProcess(
        bootstrap,
        checkpoint,
        prefix,
        hosts.workdir / f"{prefix}.log",
        command_prefix=hosts.net.prefix("driver"),
        master=hosts.master_url,
        max_offsets=max_offsets,
        task_delay_ms=task_delay_ms,
        autoscale=f"{MIN_EXECUTORS}:{MAX_EXECUTORS}",
        policy="lag",
        lag_threshold=LAG_THRESHOLD,
        autoscale_interval=2,
        window=window_s,
        decision_log=str(decision_log),
        conf=",".join(f"{k}={v}" for k, v in DRIVER_CONF.items()),
    )
    driver = Driver(hosts, process, names, checkpoint, decision_log)
    wait_until(
        "the pipeline to start",
        lambda: any(line.startswith("started") for line in process.lines) or not process.alive,
        timeout_s,
    )
    if not process.alive:
        raise ScenarioError(f"the driver exited: {process.lines[-5:]}")
    return driver


def _load(driver: Driver, count: int, rate: float, seed: int) -> Load:
    return Load(
        driver.hosts.bootstrap,
        driver.names["purchases"],
        count=count,
        rate=rate,
        seed=seed,
        products=PRODUCTS,
    ).start()


def _settle(driver: Driver, load: Load, timeout_s: float) -> None:
    load.join(timeout_s)
    if load.failed or load.error:
        raise ScenarioError(f"the load failed: {load.first_error or load.error}")
    wait_until(
        "the pipeline to catch up",
        lambda: (
            caught_up(driver.checkpoint, driver.hosts.bootstrap, driver.names["purchases"])
            or not driver.process.alive
        ),
        timeout_s,
    )
    if not driver.process.alive:
        raise ScenarioError(f"the driver exited: {driver.process.lines[-5:]}")


def _result(
    driver: Driver, scenario: str, load: Load, in_flight: set[int], t0: float
) -> FaultResult:
    topics = Topics.read(driver.hosts.bootstrap, driver.names)
    return phase_result(
        scenario,
        topics,
        load.acked,
        driver.checkpoint,
        driver.names["purchases"],
        in_flight,
        t0,
    )


# --- scenarios -------------------------------------------------------------------------------


def autoscale(driver: Driver, *, count: int, rate: float, timeout_s: float) -> FaultResult:
    """A burst: the autoscaler adds an executor (on a remote worker), then removes it."""
    t0 = time.monotonic()
    driver.wait_settled(MIN_EXECUTORS, timeout_s)
    first = len(driver.decisions())
    load = _load(driver, count, rate, seed=51)
    two = driver.wait_hosts(MAX_EXECUTORS, timeout_s)
    _settle(driver, load, timeout_s)
    one = driver.wait_hosts(MIN_EXECUTORS, timeout_s + 60)
    result = _result(driver, "autoscaler on remote workers, a burst", load, set(), t0)
    applied = [
        d for d in driver.decisions()[first:] if d["outcome"] == "applied" and d["direction"]
    ]
    result.notes.append(
        "decisions applied: "
        + ", ".join(f"{d['direction']} to {d['desired']} ({d['reason']})" for d in applied)
    )
    result.notes.append(f"executors at 2: {two}; after the scale-in: {one}")
    if not any(d["direction"] == "up" for d in applied):
        result.errors["autoscaler"] = "no scale-up applied"
    if not any(d["direction"] == "down" for d in applied):
        result.errors["autoscaler"] = "no scale-down applied"
    if not set(two.values()) | set(one.values()) <= set(WORKERS):
        result.errors["placement"] = f"executors off the workers' hosts: {two} {one}"
    return result


def _replaced(
    decisions: list[dict[str, Any]], below: int, executor: str | None = None
) -> tuple[bool, bool]:
    """Whether the log shows the capacity lost (fewer running than ``below``, or
    ``executor`` named lost: its replacement may register between two steps), and the count
    back at ``below`` from then on."""
    short = [
        i
        for i, d in enumerate(decisions)
        if d["running"] < below or any(g[0] == executor for g in d.get("lost", ()))
    ]
    back = bool(short) and any(d["running"] >= below for d in decisions[short[0] :])
    return bool(short), back


def _lost_in(decisions: list[dict[str, Any]]) -> list[list[str]]:
    """Every ``[id, reason]`` the decision log names lost."""
    return [g for d in decisions for g in d.get("lost", ())]


def _loss_costs(decisions: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every measured cost of executors lost the decision log gives (``lost`` true)."""
    return [c for d in decisions for c in d.get("scale_costs", ()) if c.get("lost")]


def _elsewhere(hosts: dict[str, str], host: str) -> bool:
    """Whether an executor runs on a host other than ``host``, its address listed."""
    return any(h not in (host, UNKNOWN_HOST) for h in hosts.values())


def worker_partition(
    driver: Driver, *, count: int, rate: float, down_s: float, timeout_s: float
) -> FaultResult:
    """The host of an executor running a task of the batch in flight: link down, ``down_s``,
    link up; the load goes on throughout."""
    t0 = time.monotonic()
    net = driver.hosts.net
    running = driver.wait_settled(MIN_EXECUTORS, timeout_s)
    first = len(driver.decisions())
    load = _load(driver, count, rate, seed=52)
    busy = ask(driver.process, "busy-executor", "busy ", timeout_s).split()[1]
    host = running.get(busy) or driver.executor_hosts()[busy]
    watch = InFlight(driver.checkpoint).start()
    net.link_down(host)
    cut_at = time.monotonic()
    time.sleep(down_s)
    replacement: dict[str, str] = {}

    def replaced() -> bool:
        nonlocal replacement
        replacement = driver.executor_hosts()
        return _elsewhere(replacement, host) or not driver.process.alive

    # The link stays down at least ``down_s``, and until the capacity is back elsewhere.
    wait_until("an executor on another host", replaced, timeout_s, step_s=1.0)
    replaced_s = time.monotonic() - cut_at
    net.link_up(host)
    wait_until(
        "both workers alive", lambda: driver.hosts.alive_workers() == len(WORKERS), timeout_s
    )
    in_flight = watch.stop(timeout_s)
    _settle(driver, load, timeout_s)
    result = _result(driver, f"worker host cut off {down_s:.0f} s mid-batch", load, in_flight, t0)
    decisions = driver.decisions()[first:]
    short, back = _replaced(decisions, MIN_EXECUTORS, busy)
    lost = _lost_in(decisions)
    result.notes.append(
        f"executor {busy} on {host} busy when its link went down; executors {replacement} "
        f"{replaced_s:.0f} s later, when it came back up; decision log: below target {short}, "
        f"back {back}, lost {lost}, its cost {_loss_costs(decisions)}"
    )
    if not (short and back):
        result.errors["autoscaler"] = "the decision log does not show the capacity replaced"
    if not _elsewhere(replacement, host):
        result.errors["replacement"] = f"no executor replaced on the other host: {replacement}"
    return result


def broker_partition(
    driver: Driver, *, count: int, rate: float, down_s: float, timeout_s: float
) -> FaultResult:
    """Broker 1 (leader of every partition of the run's topics) cut off from brokers 2 and 3
    for ``down_s`` while the load and the pipeline go on, then healed."""
    t0 = time.monotonic()
    net = driver.hosts.net
    load = _load(driver, count, rate, seed=53)
    wait_until("a third of the load", lambda: load.done >= count // 3, timeout_s)
    watch = InFlight(driver.checkpoint).start()
    net.isolate(KAFKA_HOSTS[0], KAFKA_HOSTS[1:])
    try:
        time.sleep(down_s)
        # As the majority side sees it (brokers 2 and 3): broker 1 fenced, leaders moved.
        during = leaders(driver, KAFKA_HOSTS[1:])
    finally:
        net.heal()
    in_flight = watch.stop(timeout_s)
    _settle(driver, load, timeout_s)
    wait_until(
        "every replica in sync",
        lambda: in_sync(driver.hosts.bootstrap, list(driver.names.values())),
        timeout_s,
    )
    result = _result(
        driver, f"broker leader cut off from the others {down_s:.0f} s", load, in_flight, t0
    )
    result.notes.append(
        f"load: {len(load.acked)} acked, {load.failed} failed; partition leaders of the "
        f"purchases seen by brokers 2 and 3 at the end of the partition: {during}, after "
        f"the heal: {leaders(driver, KAFKA_HOSTS)}"
    )
    return result


def leaders(driver: Driver, hosts: Sequence[str]) -> dict[int, int]:
    """Partition -> leader of the purchases topic, asking the brokers on ``hosts`` only."""
    ports = dict((a.split(":")[0], a.split(":")[1]) for a in driver.hosts.bootstrap.split(","))
    bootstrap = ",".join(
        f"{driver.hosts.net.address(h)}:{ports[driver.hosts.net.address(h)]}" for h in hosts
    )
    admin = KafkaAdmin({"bootstrap.servers": bootstrap}, timeout_s=10)
    try:
        found = admin.metadata().topics[driver.names["purchases"]].partitions
        return {p: found[p].leader for p in sorted(found)}
    except Exception:
        return {}
    finally:
        admin.close()


def worker_lost(driver: Driver, *, count: int, rate: float, timeout_s: float) -> FaultResult:
    """With two executors running, a worker's host lost for good: link down, then its Worker
    and executors SIGKILLed. The count comes back on the other host."""
    t0 = time.monotonic()
    net = driver.hosts.net
    first = len(driver.decisions())
    load = _load(driver, count, rate, seed=54)
    two = driver.wait_hosts(MAX_EXECUTORS, timeout_s)
    lost = sorted(set(two.values()))[0]
    watch = InFlight(driver.checkpoint).start()
    net.link_down(lost)
    worker = driver.hosts.worker_pid(lost)
    for pid in [*processes.descendants(worker), worker]:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    lost_at = time.monotonic()
    back = driver.wait_hosts(MAX_EXECUTORS, timeout_s, avoid=lost)
    back_s = time.monotonic() - lost_at
    in_flight = watch.stop(timeout_s)
    _settle(driver, load, timeout_s)
    result = _result(driver, "worker host lost for good", load, in_flight, t0)
    decisions = driver.decisions()[first:]
    short, again = _replaced(decisions, MAX_EXECUTORS)
    lost_logged = _lost_in(decisions)
    result.notes.append(
        f"executors before: {two}; {lost} lost; {MAX_EXECUTORS} back after {back_s:.0f} s: "
        f"{back}; decision log: below target {short}, back {again}, lost {lost_logged}, "
        f"its cost {_loss_costs(decisions)}"
    )
    if set(back.values()) & {lost}:
        result.errors["replacement"] = f"executors still on the lost host: {back}"
    return result


def stop_driver(driver: Driver) -> int:
    code = driver.process.stop()
    if driver.process.alive:
        driver.process.kill()
    return code
