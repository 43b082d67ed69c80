"""Spark-side faults during a real enrichment run under load (issue 13, Deliver item 1).

Shared by the fault tests (short runs) and ``benchmarks/faults.py`` (long runs), on the
building blocks of :mod:`scenarios` (topics with RF 3 and min ISR 2 on the three-node
cluster, the purchases generator with spoiled records, the pipeline in its own process,
the duplicate bound from the checkpoint):

- :func:`executor_faults`: on a standalone cluster (executors of one core), an executor
  JVM SIGKILLed while it runs a task of the batch in flight, then, in a second phase of the
  same run, an executor removed by the autoscaler's actuator (``SparkActuator.apply(1)``)
  while it runs one;
- :func:`driver_kills`: the driver SIGKILLed at named points of a batch (:data:`enrichment_proc.
  KILL_POINTS`: while its tasks write, after its output and before its commit, while the
  state stage updates the referential in the state store, ...) and at random moments,
  restarted from the checkpoint each time; referential renames arrive meanwhile; the output
  is checked against the reference (:func:`streamscale.experiment.verify.compare_enrichment`)
  and every repeated output record is identical to its first copy.

Each phase ends with a reconciliation of its own purchases (input = output + dead letters by
key and count) and a stronger check than the count bound: every duplicated purchase lies in
one of the micro-batches that were in flight at a fault (its offset within that batch's range
in the offset log).
"""

from __future__ import annotations

import json
import os
import random
import signal
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from enrichment_proc import KILL_POINTS
from scenarios import (
    FaultResult,
    Load,
    PipelineProcess,
    ScenarioError,
    _batch_ids,
    aborted_records,
    batch_offsets,
    batch_records,
    caught_up,
    create_topics,
    load_referential,
    uncommitted,
    wait_until,
)

from streamscale import cluster as standalone
from streamscale import processes
from streamscale.experiment.verify import (
    Verification,
    compare_enrichment,
    dead_letters_of,
    reconcile,
)
from streamscale.generate.producer import produce
from streamscale.generate.profiles import make_schedule
from streamscale.generate.referential import product_json
from streamscale.kafka import broker as embedded
from streamscale.kafka.admin import KafkaAdmin
from streamscale.settings import Settings

EXECUTOR_CLASS = "org.apache.spark.executor.CoarseGrainedExecutorBackend"
__all__ = ["KILL_POINTS", "driver_kills", "executor_faults"]


# --- reading back: per-phase reconciliation, duplicates located in batches ---------------------


@dataclass
class Topics:
    """Every record of the run's purchases, output and (purchase) dead letters."""

    purchases: list[Any]
    output: list[Any]
    dead: list[Any]

    aborted: int = 0
    """Output and dead-letter records of aborted transactions (exactly-once only)."""

    @classmethod
    def read(cls, bootstrap: str, names: dict[str, str], delivery: str = "at-least-once") -> Topics:
        admin = KafkaAdmin({"bootstrap.servers": bootstrap}, timeout_s=30)
        isolation = "read_committed" if delivery == "exactly-once" else None
        try:
            purchases = admin.read_all(names["purchases"])
            output = admin.read_all(names["output"], isolation=isolation)
            dead = dead_letters_of(
                admin.read_all(names["dlq"], isolation=isolation), names["purchases"]
            )
            aborted = aborted_records(admin, [names["output"], names["dlq"]], delivery)
        finally:
            admin.close()
        return cls(purchases, output, dead, aborted)


def batch_of(checkpoint: Path, topic: str) -> dict[int, list[tuple[int, int, int]]]:
    """Per partition, the ``(start, end, batch id)`` offset ranges of the offset log."""
    ranges: dict[int, list[tuple[int, int, int]]] = defaultdict(list)
    previous: dict[int, int] = {}
    for batch_id in sorted(_batch_ids(checkpoint / "offsets")):
        end = batch_offsets(checkpoint, topic, batch_id)
        for partition, offset in end.items():
            start = previous.get(partition, 0)
            if offset > start:
                ranges[partition].append((start, offset, batch_id))
        previous.update(end)
    return ranges


def locate(ranges: dict[int, list[tuple[int, int, int]]], partition: int, offset: int) -> int:
    """The batch whose range holds ``offset`` of ``partition`` (-1: none)."""
    for start, end, batch_id in ranges.get(partition, []):
        if start <= offset < end:
            return batch_id
    return -1


def phase_result(
    scenario: str,
    topics: Topics,
    keys: Iterable[bytes],
    checkpoint: Path,
    topic: str,
    in_flight: set[int],
    started: float,
    seconds: float | None = None,
) -> FaultResult:
    """Reconcile the purchases with ``keys`` (one phase's load); locate each duplicated one
    in the offset log: ``notes`` say which batches the duplicates came from, and
    ``errors['outside']`` lists any outside the in-flight batches (there must be none)."""
    wanted = set(keys)
    inputs = [m for m in topics.purchases if m.key() in wanted]
    outputs = [m.key() for m in topics.output if m.key() in wanted]
    dead = [m.key() for m in topics.dead if m.key() in wanted]
    rec = reconcile((m.key() for m in inputs), outputs, dead)
    written = Counter(outputs) + Counter(dead)
    ranges = batch_of(checkpoint, topic)
    by_batch: Counter[int] = Counter()
    for msg in inputs:
        extra = written.get(msg.key(), 0) - 1
        if extra > 0:
            by_batch[locate(ranges, msg.partition(), msg.offset())] += extra
    bound = sum(batch_records(checkpoint, topic, b) for b in in_flight)
    result = FaultResult(
        scenario,
        rec,
        bound,
        time.monotonic() - started if seconds is None else seconds,
        acked=len(wanted),
        acked_missing=len(wanted - {m.key() for m in inputs}),
        aborted=topics.aborted,
    )
    result.notes.append(
        f"in flight at the faults: batches {sorted(in_flight)} "
        f"({', '.join(str(batch_records(checkpoint, topic, b)) for b in sorted(in_flight))} "
        f"records); duplicates by batch {dict(sorted(by_batch.items()))}"
    )
    outside = {b: n for b, n in by_batch.items() if b not in in_flight}
    if outside:
        result.errors["outside"] = f"duplicates outside the in-flight batches: {outside}"
    return result


# --- executors: find their JVM, kill it; the actuator removes one -----------------------------


def cmdline(pid: int) -> list[str]:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return [a.decode(errors="replace") for a in f.read().split(b"\0") if a]
    except OSError:
        return []


def executor_pid(worker_pids: Iterable[int], app_id: str, executor_id: str) -> int:
    """The JVM (``CoarseGrainedExecutorBackend``) of executor ``executor_id`` of ``app_id``,
    found among the descendants of the standalone workers."""
    for worker in worker_pids:
        for pid in processes.descendants(worker):
            argv = cmdline(pid)
            if EXECUTOR_CLASS not in argv or app_id not in argv:
                continue
            i = argv.index("--executor-id") if "--executor-id" in argv else -1
            if i >= 0 and i + 1 < len(argv) and argv[i + 1] == executor_id:
                return pid
    raise ScenarioError(f"no JVM of executor {executor_id} of {app_id} under {list(worker_pids)}")


def ask(pipeline: PipelineProcess, command: str, prefix: str, timeout_s: float) -> str:
    """Send a fault command and wait for its one-line answer (starting with ``prefix``)."""
    seen = len(pipeline.lines)
    pipeline.send(command)

    def answered() -> bool:
        return (
            any(line.startswith((prefix, "command failed")) for line in pipeline.lines[seen:])
            or not pipeline.alive
        )

    wait_until(f"an answer to {command!r}", answered, timeout_s, step_s=0.005)
    for line in pipeline.lines[seen:]:
        if line.startswith(prefix):
            return line
        if line.startswith("command failed"):
            raise ScenarioError(f"{command!r}: {line}")
    raise ScenarioError(f"the pipeline exited before answering {command!r}")


def executors(pipeline: PipelineProcess, timeout_s: float = 30) -> list[str]:
    line = ask(pipeline, "executors", "executors ", timeout_s)
    parts = line.split()
    return [e for e in parts[2].split(",") if e] if int(parts[1]) else []


def wait_executors(pipeline: PipelineProcess, count: int, timeout_s: float) -> float:
    """Seconds until exactly ``count`` executors run."""
    start = time.monotonic()
    wait_until(
        f"{count} executors",
        lambda: len(executors(pipeline)) == count or not pipeline.alive,
        timeout_s,
        step_s=0.3,
    )
    return time.monotonic() - start


def lost_tasks(log: Path, since: int, batches: set[int]) -> int:
    """Tasks of ``batches`` the driver logged as lost with their executor, since byte
    ``since`` of its log."""
    try:
        with open(log, "rb") as f:
            f.seek(since)
            text = f.read().decode(errors="replace")
    except OSError:
        return 0
    marks = ("Lost task", "its executor exited")  # SIGKILLed; removed by the driver
    tags = tuple(f"[batchId = {b}]" for b in batches)
    return sum(
        1
        for line in text.splitlines()
        if any(m in line for m in marks) and any(t in line for t in tags)
    )


def executor_faults(
    kafka: embedded.Broker,
    spark_cluster: standalone.Cluster,
    workdir: Path,
    *,
    purchases: int = 3_000,
    rate: float = 1_000,
    products: int = 1_000,
    partitions: int = 3,
    max_offsets: int = 1_500,
    timeout_s: float = 240,
    delivery: str = "at-least-once",
    faults: tuple[str, ...] = ("sigkill", "removal"),
) -> list[FaultResult]:
    """One enrichment run on ``spark_cluster`` (two executors of one core), two phases, each
    with its own load of ``purchases``: (1) the JVM of an executor that runs a task of the
    batch in flight is SIGKILLed (the Master launches a replacement); (2) the actuator's
    ``apply(1)`` removes an executor that runs a task. Each phase waits for the pipeline to
    catch up, then the phases are reconciled apart; the actuator must report the SIGKILLed
    executor lost (with Spark's reason) and not the one it removed (``errors["lost"]``).
    ``faults`` picks the phases: ``sigkill`` for (1), ``removal`` for (2)."""
    started = time.monotonic()
    bootstrap = kafka.bootstrap
    prefix = f"fc-{uuid.uuid4().hex[:6]}"
    names = create_topics(bootstrap, prefix, partitions)
    load_referential(bootstrap, names["referential"], products, seed=31)
    checkpoint = workdir / f"{prefix}-checkpoint"
    log = workdir / f"{prefix}.log"
    pipeline = PipelineProcess(
        bootstrap,
        checkpoint,
        prefix,
        log,
        max_offsets=max_offsets,
        task_delay_ms=500,  # a removal or a SIGKILL then strikes a running task, not a race
        master=spark_cluster.master_url,  # type: ignore[arg-type]
        max_executors=2,
        delivery=delivery,
    )
    phases: list[tuple[str, Load, set[int], float, list[str]]] = []
    lost_errors: dict[str, str] = {}
    try:
        wait_until(
            "the pipeline to start",
            lambda: (
                any(line.startswith("started") for line in pipeline.lines) or not pipeline.alive
            ),
            timeout_s,
        )
        wait_executors(pipeline, 2, timeout_s)
        # Batch 0 (the referential) starts the executors' Python workers; each phase's
        # fault then strikes the first batch of its load that runs a task.
        wait_until(
            "the first batch", lambda: pipeline.batches() > 0 or not pipeline.alive, timeout_s
        )
        plan = [
            (phase, seed)
            for fault, phase, seed in (
                ("sigkill", "executor SIGKILLed mid-batch", 32),
                ("removal", "executor removed by the actuator mid-batch", 33),
            )
            if fault in faults
        ]
        for phase, seed in plan:
            t0 = time.monotonic()
            notes: list[str] = []
            load = Load(
                bootstrap,
                names["purchases"],
                count=purchases,
                rate=rate,
                seed=seed,
                products=products,
            ).start()
            driver_log = workdir / f"{prefix}-spark-driver.log"
            log_at = driver_log.stat().st_size if driver_log.exists() else 0
            in_flight: set[int] = set()
            if phase.startswith("executor SIGKILLed"):
                busy = ask(pipeline, "busy-executor", "busy ", timeout_s).split()
                executor_id, app_id = busy[1], busy[2]
                pid = executor_pid(spark_cluster.worker_pids, app_id, executor_id)
                os.kill(pid, signal.SIGKILL)
                fault_at = time.monotonic()
                in_flight |= uncommitted(checkpoint)
                notes.append(
                    f"executor {executor_id} (pid {pid}, {busy[4]} task(s) running) SIGKILLed "
                    f"during batch(es) {sorted(in_flight)}"
                )
            else:
                line = ask(pipeline, "remove-busy-executor 1", "removed ", timeout_s)
                fault_at = time.monotonic()
                in_flight |= uncommitted(checkpoint)
                notes.append(f"actuator: {line}, during batch(es) {sorted(in_flight)}")
                if " ok True " not in line:
                    raise ScenarioError(f"the actuator did not remove an executor: {line}")
            interrupted = max(in_flight, default=0)
            wait_until(
                "the interrupted batch to commit",
                lambda b=interrupted: b in _batch_ids(checkpoint / "commits") or not pipeline.alive,
                timeout_s,
                step_s=0.05,
            )
            recovered = time.monotonic() - fault_at
            load.join(timeout_s)
            wait_until(
                "the pipeline to catch up",
                lambda: caught_up(checkpoint, bootstrap, names["purchases"]) or not pipeline.alive,
                timeout_s,
            )
            caught = time.monotonic() - fault_at
            want = 2 if phase.startswith("executor SIGKILLed") else 1
            wait_executors(pipeline, want, timeout_s)
            lost = lost_tasks(driver_log, log_at, in_flight)
            if not lost:
                raise ScenarioError(f"{phase}: no task was lost: the fault struck no running task")
            # The actuator names the SIGKILLed executor lost, with Spark's reason, and not the
            # one it removed itself (what the autoscaler's decision log shows as ``lost``).
            gone = ask(pipeline, "lost", "lost ", timeout_s).split(" ", 1)[1].strip()
            named = {g.split("=", 1)[0]: g.partition("=")[2] for g in gone.split("|") if "=" in g}
            expected = {executor_id} if phase.startswith("executor SIGKILLed") else set()
            notes.append(f"executors lost, as the actuator reports them: {named or 'none'}")
            notes.append(
                f"interrupted batch committed {recovered:.1f} s after the fault, caught up "
                f"after {caught:.1f} s, {want} executor(s) running after "
                f"{time.monotonic() - fault_at:.1f} s; {lost} task(s) of the batch lost and "
                "run again (driver's log)"
            )
            if load.failed or load.error:
                raise ScenarioError(f"{phase}: the load failed: {load.first_error or load.error}")
            phases.append((phase, load, in_flight, time.monotonic() - t0, notes))
            if set(named) != expected or not all(named.values()):
                lost_errors[phase] = f"executors reported lost {named}, expected {expected}"
        code = pipeline.stop()
        error = pipeline.error()
    finally:
        if pipeline.alive:
            pipeline.kill()
    topics = Topics.read(bootstrap, names, delivery)
    results = []
    for phase, load, in_flight, seconds, notes in phases:
        result = phase_result(
            phase, topics, load.acked, checkpoint, names["purchases"], in_flight, started, seconds
        )
        result.notes += notes
        result.delivery = delivery
        result.notes.append(f"pipeline exit {code}, {pipeline.batches()} batches in the run")
        if error:
            result.errors["pipeline"] = error
        if phase in lost_errors:
            result.errors["lost"] = lost_errors[phase]
        results.append(result)
    return results


# --- the driver: SIGKILLed at points of a batch, restarted from the checkpoint ---------------


@dataclass
class DriverKill:
    point: str
    batch: int | None
    in_flight: set[int]
    restart_s: float
    """From the process start to its death."""


@dataclass
class DriverResult:
    result: FaultResult
    kills: list[DriverKill] = field(default_factory=list)
    reference: Verification | None = None
    differing_copies: int = 0
    """Purchases written more than once with different values (a replay must repeat)."""


def rename(bootstrap: str, topic: str, products: int, count: int, seed: int) -> None:
    """Rename ``count`` products of the referential (new values for existing keys)."""
    rng = random.Random(seed)
    ids = rng.sample(range(1, products + 1), count)
    records = (
        (topic, str(pid), product_json(pid, f"renamed {seed}-{pid}"), 0, True) for pid in ids
    )
    schedule = make_schedule("steady", rate=1e9, count=count)
    produce(Settings(bootstrap_servers=bootstrap), records, schedule, [topic], progress=False)


def known_names(bootstrap: str, topic: str) -> dict[int, set[str]]:
    admin = KafkaAdmin({"bootstrap.servers": bootstrap}, timeout_s=30)
    try:
        records = admin.read_all(topic)
    finally:
        admin.close()
    names: dict[int, set[str]] = defaultdict(set)
    for msg in records:
        if msg.value() is not None:
            row = json.loads(msg.value())
            names[int(row["id"])].add(str(row["name"]))
    return names


def driver_kills(
    kafka: embedded.Broker,
    workdir: Path,
    *,
    plan: tuple[str, ...] = ("random", "state"),
    purchases: int = 1_500,
    rate: float = 1_000,
    products: int = 1_000,
    partitions: int = 3,
    max_offsets: int = 500,
    seed: int = 41,
    timeout_s: float = 240,
    delivery: str = "at-least-once",
) -> DriverResult:
    """The enrichment (local mode), its driver SIGKILLed once for each entry of ``plan``:
    at a named point of a batch (by itself, ``enrichment_proc.py --kill-at``) or, for
    ``random``, at a random moment while a batch is in flight (by this process, SIGKILL to
    the driver's process group), restarted from the checkpoint after each death;
    every run gets a new load of ``purchases`` at ``rate``/s from the generator, so each
    has batches to run; referential renames arrive after the first kill; the last run
    catches up and stops. Reconciled, checked against the reference."""
    started = time.monotonic()
    bootstrap = kafka.bootstrap
    prefix = f"fd-{uuid.uuid4().hex[:6]}"
    names = create_topics(bootstrap, prefix, partitions)
    load_referential(bootstrap, names["referential"], products, seed=seed)
    checkpoint = workdir / f"{prefix}-checkpoint"
    log = workdir / f"{prefix}.log"
    rng = random.Random(seed)
    loads: list[Load] = []
    kills: list[DriverKill] = []
    in_flight: set[int] = set()
    current: PipelineProcess | None = None

    def load(n: int) -> Load:
        found = Load(
            bootstrap,
            names["purchases"],
            count=purchases,
            rate=rate,
            seed=seed + 100 + n,
            products=products,
        ).start()
        loads.append(found)
        return found

    try:
        for n, point in enumerate(plan):
            t0 = time.monotonic()
            offsets = _batch_ids(checkpoint / "offsets")
            opts: dict[str, Any] = {
                "max_offsets": max_offsets,
                "seed": seed + n,
                "delivery": delivery,
            }
            if point != "random":
                opts["kill_at"] = point
                # ``state``: on the first batch of a restart (the replay of the interrupted
                # one, its state version rewritten); elsewhere the first new batch after it.
                opts["kill_batch"] = 0 if point == "state" else (max(offsets, default=0) + 1)
            current = PipelineProcess(bootstrap, checkpoint, prefix, log, **opts)
            proc = current
            load(n)
            if point == "random":
                # A batch in flight (planned, not committed) after a committed one, then
                # SIGKILL the driver's process group at a random moment.
                committed = max(_batch_ids(checkpoint / "commits"), default=-1)

                def running(proc: PipelineProcess = proc, after: int = committed) -> bool:
                    done = _batch_ids(checkpoint / "commits")
                    new = max(done, default=-1) > after
                    return (new and bool(uncommitted(checkpoint))) or not proc.alive

                wait_until("a batch in flight", running, timeout_s, step_s=0.01)
                time.sleep(rng.uniform(0.0, 0.5))
                os.killpg(proc.proc.pid, signal.SIGKILL)
                proc.proc.wait(30)
            else:
                dead = f"the driver to die at {point}"
                wait_until(dead, lambda proc=proc: not proc.alive, timeout_s)
            dying = next((ln for ln in proc.lines if ln.startswith("killing at")), None)
            if point != "random" and dying is None:
                raise ScenarioError(
                    f"the driver exited ({proc.proc.returncode}) without reaching {point}: "
                    f"{proc.error()}"
                )
            proc.kill()
            now_in_flight = uncommitted(checkpoint)
            in_flight |= now_in_flight
            batch = int(dying.split()[-1]) if dying else None
            kills.append(DriverKill(point, batch, now_in_flight, time.monotonic() - t0))
            if n == 0:
                rename(bootstrap, names["referential"], products, products // 10, seed)
        current = PipelineProcess(
            bootstrap, checkpoint, prefix, log, max_offsets=max_offsets, delivery=delivery
        )
        last = current
        for each in loads:
            each.join(timeout_s)
        wait_until(
            "the pipeline to catch up",
            lambda: caught_up(checkpoint, bootstrap, names["purchases"]) or not last.alive,
            timeout_s,
        )
        code = last.stop()
        error = last.error()
    finally:
        if current is not None and current.alive:
            current.kill()
    topics = Topics.read(bootstrap, names, delivery)
    result = phase_result(
        "driver SIGKILLed at points of a batch, restarted",
        topics,
        [key for each in loads for key in each.acked],
        checkpoint,
        names["purchases"],
        in_flight,
        started,
    )
    result.delivery = delivery
    result.notes.append(f"last run exit {code}, {last.batches()} batches")
    if error:
        result.errors["pipeline"] = error
    failed = [each for each in loads if each.failed or each.error]
    if failed:
        result.errors["load"] = f"{failed[0].failed} failed: {failed[0].first_error}"
    reference = compare_enrichment(
        ((m.key(), m.value(), 0) for m in topics.purchases),
        ((m.key(), m.value(), 0) for m in topics.output),
        ((m.key(), m.value(), 0) for m in topics.dead),
        known_names(bootstrap, names["referential"]),
    )
    first: dict[bytes, bytes | None] = {}
    differing = 0
    for msg in topics.output:
        if msg.key() in first:
            differing += first[msg.key()] != msg.value()
        else:
            first[msg.key()] = msg.value()
    return DriverResult(result, kills, reference, differing)
