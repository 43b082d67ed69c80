"""Broker faults during a real enrichment run on a three-node Apache Kafka cluster.

Shared by the fault tests (short runs) and ``benchmarks/faults.py`` (long runs). Each
scenario creates its own topics (RF 3, ``min.insync.replicas=2``, every partition led by node
1), loads the referential with the project's generator, runs the enrichment pipeline in its
own process (:mod:`enrichment_proc`) under load from the purchases generator, injects the
fault, and ends with a reconciliation read from the topics themselves
(:func:`streamscale.experiment.verify.reconcile_topics`): every purchase is in the output or the
dead-letter topic, duplicates counted; every record a producer saw acknowledged is in the
input topic. The duplicate bound is computed from the pipeline's checkpoint: the records of
the micro-batches that were in flight when the fault struck or when the pipeline failed.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from streamscale.experiment.verify import Reconciliation, reconcile_topics
from streamscale.generate import Record
from streamscale.generate.producer import produce
from streamscale.generate.profiles import make_schedule
from streamscale.generate.purchases import purchase_records
from streamscale.generate.referential import plan_for_products, referential_records
from streamscale.kafka import broker as embedded
from streamscale.kafka.admin import KafkaAdmin
from streamscale.kafka.offsets import TopicPartition
from streamscale.settings import Settings

HERE = Path(__file__).resolve().parent
LEADER = 1
"""The node that leads every partition of a scenario's topics."""
SPOIL_EVERY = 250
"""One purchase in this many is spoiled (truncated JSON): dead letters under faults too."""


class ScenarioError(AssertionError):
    """A scenario could not reach the state it waits for within its bound."""


def wait_until(what: str, check: Callable[[], bool], timeout_s: float, step_s: float = 0.5) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            raise ScenarioError(f"timed out after {timeout_s:.0f} s waiting for {what}")
        time.sleep(step_s)


# --- topics ------------------------------------------------------------------------------


def topic_names(prefix: str) -> dict[str, str]:
    from enrichment_proc import topics

    t = topics(prefix)
    return {
        "purchases": t.purchases,
        "referential": t.referential,
        "output": t.output,
        "dlq": t.dlq,
    }


def create_topics(bootstrap: str, prefix: str, partitions: int) -> dict[str, str]:
    """The pipeline's topics, RF 3 and min ISR 2, every partition led by :data:`LEADER`."""
    from confluent_kafka.admin import AdminClient, NewTopic

    names = topic_names(prefix)
    followers = [n for n in (1, 2, 3) if n != LEADER]
    assignment = [
        [LEADER, *(followers if p % 2 == 0 else followers[::-1])] for p in range(partitions)
    ]
    admin = AdminClient({"bootstrap.servers": bootstrap})
    new = []
    for role, name in names.items():
        config = {"min.insync.replicas": "2", "retention.ms": "-1"}
        if role == "referential":
            config["cleanup.policy"] = "compact"
        new.append(
            NewTopic(
                name,
                num_partitions=partitions,
                replica_assignment=assignment,
                config=config,
            )
        )
    for future in admin.create_topics(new, operation_timeout=30).values():
        future.result(timeout=30)
    kadmin = KafkaAdmin({"bootstrap.servers": bootstrap}, timeout_s=30)
    try:
        kadmin.wait_for_topics(list(names.values()))
    finally:
        kadmin.close()
    return names


def in_sync(bootstrap: str, topics: list[str], replicas: int = 3) -> bool:
    """Every partition of ``topics`` has ``replicas`` in-sync replicas and leader 1 or other."""
    admin = KafkaAdmin({"bootstrap.servers": bootstrap}, timeout_s=5)
    try:
        md = admin.metadata()
    except Exception:
        return False
    finally:
        admin.close()
    for name in topics:
        found = md.topics.get(name)
        if found is None or found.error is not None:
            return False
        if any(len(p.isrs) < replicas or p.leader < 0 for p in found.partitions.values()):
            return False
    return True


def restore(data_dir: Path, bootstrap: str, topics: list[str], timeout_s: float = 120) -> None:
    """Start every stopped node and wait until the topics are fully in sync again."""
    running = {n.node_id for n in embedded.nodes(data_dir)}
    for node in (1, 2, 3):
        if node not in running:
            embedded.start_node(data_dir, node)
    wait_until("three brokers", lambda: embedded.answers_metadata(bootstrap) >= 3, timeout_s)
    wait_until("every replica in sync", lambda: in_sync(bootstrap, topics), timeout_s)


# --- load ----------------------------------------------------------------------------------


def spoiled(records: Iterator[Record], every: int) -> Iterator[Record]:
    """The records, one in ``every`` with its value cut in half (not JSON any more)."""
    for i, (topic, key, value, ts, counted) in enumerate(records):
        if every and i % every == every - 1 and value is not None:
            value = value[: len(value) // 2]
        yield topic, key, value, ts, counted


class Load:
    """The purchases generator in a thread, with every acknowledgement recorded by key."""

    def __init__(
        self,
        bootstrap: str,
        topic: str,
        *,
        count: int,
        rate: float,
        seed: int,
        products: int,
        delivery_timeout_ms: int = 120_000,
    ) -> None:
        self.count = count
        self.acked: list[bytes] = []
        self.failed = 0
        self.first_error: str | None = None
        self.error: str | None = None
        self._lock = threading.Lock()
        settings = Settings(bootstrap_servers=bootstrap)
        records = spoiled(
            purchase_records(random.Random(seed), count, topic, products=products), SPOIL_EVERY
        )
        schedule = make_schedule("steady", rate=rate, count=count)
        overrides = {
            "on_delivery": self._report,
            "delivery.report.only.error": False,
            "delivery.timeout.ms": delivery_timeout_ms,
        }

        def run() -> None:
            try:
                produce(settings, records, schedule, [topic], progress=False, overrides=overrides)
            except Exception as exc:
                self.error = str(exc)

        self.thread = threading.Thread(target=run, name=f"load-{seed}", daemon=True)

    def _report(self, err: Any, msg: Any) -> None:
        with self._lock:
            if err is None:
                self.acked.append(msg.key())
            else:
                self.failed += 1
                if self.first_error is None:
                    self.first_error = err.str()

    def start(self) -> Load:
        self.thread.start()
        return self

    @property
    def done(self) -> int:
        return len(self.acked) + self.failed

    def join(self, timeout_s: float) -> None:
        self.thread.join(timeout_s)
        if self.thread.is_alive():
            raise ScenarioError(f"the load generator did not finish within {timeout_s:.0f} s")


def load_referential(bootstrap: str, topic: str, products: int, seed: int) -> None:
    plan = plan_for_products(products, 0.0, 0.0)
    records = referential_records(random.Random(seed), plan, topic)
    schedule = make_schedule("steady", rate=1e9, count=plan.total)
    produce(Settings(bootstrap_servers=bootstrap), records, schedule, [topic], progress=False)


# --- the pipeline process --------------------------------------------------------------------


class PipelineProcess:
    """``enrichment_proc.py`` in a child process (its own process group, so that its Spark
    JVM goes with it); its lines are collected by a thread."""

    def __init__(
        self,
        bootstrap: str,
        checkpoint: Path,
        prefix: str,
        log: Path,
        *,
        command_prefix: Sequence[str] = (),
        **opts: int | str,
    ):
        """``command_prefix``: what runs the child (``ip netns exec NS``: in a network
        namespace, tests/integration/hosts); ``opts``: ``enrichment_proc.py``'s options."""
        argv = [*command_prefix, sys.executable, str(HERE / "enrichment_proc.py"), bootstrap]
        argv.append(str(checkpoint))
        argv.append(prefix)
        for name, value in opts.items():
            argv += [f"--{name.replace('_', '-')}", str(value)]
        self.lines: list[str] = []
        path = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
        self._log = open(log, "a")  # noqa: SIM115 (closed in wait)
        self.proc = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._log,
            text=True,
            cwd=HERE,
            env={**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE), *path])},
            start_new_session=True,
        )
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None

    def send(self, command: str) -> None:
        """One fault command on the process's stdin (``enrichment_proc.py --master``)."""
        assert self.proc.stdin is not None
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()

    def error(self) -> str | None:
        return next((line for line in self.lines if line.startswith("error: ")), None)

    def batches(self) -> int:
        return sum(1 for line in self.lines if line.startswith("batch "))

    def stop(self, timeout_s: float = 120) -> int:
        """SIGTERM (the runner stops after the batch in flight), SIGKILL to its group after
        ``timeout_s``; its exit status."""
        if self.alive:
            os.kill(self.proc.pid, signal.SIGTERM)
        try:
            code = self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            code = self.proc.wait(30)
        self._reader.join(10)
        self._log.close()
        return code

    def kill(self) -> None:
        """Clean-up: SIGKILL the process group if anything of it is still there."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(30)
        self._log.close()


# --- the checkpoint: batches, their sizes, what is caught up ---------------------------------


def _batch_ids(folder: Path) -> set[int]:
    return {int(p.name) for p in folder.glob("*") if p.name.isdigit()} if folder.exists() else set()


def batch_offsets(checkpoint: Path, topic: str, batch_id: int) -> dict[int, int]:
    """``topic``'s end offsets of ``batch_id`` in the offset log (``{}`` if absent)."""
    path = checkpoint / "offsets" / str(batch_id)
    if not path.exists():
        return {}
    for line in path.read_text().splitlines()[2:]:
        if line.startswith("{") and topic in line:
            found = json.loads(line).get(topic)
            if found is not None:
                return {int(p): int(o) for p, o in found.items()}
    return {}


def batch_records(checkpoint: Path, topic: str, batch_id: int) -> int:
    """Records of ``topic`` in micro-batch ``batch_id`` (its offset range)."""
    end = batch_offsets(checkpoint, topic, batch_id)
    start = batch_offsets(checkpoint, topic, batch_id - 1) if batch_id > 0 else {}
    return sum(o - start.get(p, 0) for p, o in end.items())


def uncommitted(checkpoint: Path) -> set[int]:
    """Batches planned (in the offset log) but not committed: in flight, or failed."""
    return _batch_ids(checkpoint / "offsets") - _batch_ids(checkpoint / "commits")


class InFlight:
    """The batches uncommitted at any moment of a fault, polled from the checkpoint in a thread
    (every ``step_s``) from :meth:`start` until :meth:`stop`, which waits first for a batch
    planned after the recovery to commit: a batch planned and retried between two samples
    (say, sent to an executor whose host is already cut off) is in the window too."""

    def __init__(self, checkpoint: Path, step_s: float = 0.05) -> None:
        self.checkpoint = checkpoint
        self.step_s = step_s
        self.batches: set[int] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)

    def _poll(self) -> None:
        while not self._stop.is_set():
            self.batches |= uncommitted(self.checkpoint)
            self._stop.wait(self.step_s)

    def start(self) -> InFlight:
        self.batches |= uncommitted(self.checkpoint)
        self._thread.start()
        return self

    def stop(self, timeout_s: float) -> set[int]:
        """Once a batch planned from now on has committed (or ``timeout_s`` passed): the
        batches seen in flight."""
        planned = max(_batch_ids(self.checkpoint / "offsets"), default=-1)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if max(_batch_ids(self.checkpoint / "commits"), default=-1) > planned:
                break
            time.sleep(self.step_s)
        self._stop.set()
        self._thread.join()
        self.batches |= uncommitted(self.checkpoint)
        return self.batches


def caught_up(checkpoint: Path, bootstrap: str, topic: str) -> bool:
    """The last committed batch ends at the end offsets of ``topic``."""
    commits = _batch_ids(checkpoint / "commits")
    if not commits:
        return False
    done = batch_offsets(checkpoint, topic, max(commits))
    admin = KafkaAdmin({"bootstrap.servers": bootstrap}, timeout_s=10)
    try:
        counts = admin.topics()
        ends = admin.end_offsets([TopicPartition(topic, p) for p in range(counts[topic])])
    except Exception:
        return False
    finally:
        admin.close()
    return all(done.get(tp.partition, 0) >= end for tp, end in ends.items())


# --- results -----------------------------------------------------------------------------------


@dataclass
class FaultResult:
    scenario: str
    reconciliation: Reconciliation
    duplicate_bound: int
    seconds: float
    acked: int = 0
    acked_missing: int = 0
    errors: dict[str, str] = field(default_factory=dict)
    """One-line errors as printed, by who printed them."""
    notes: list[str] = field(default_factory=list)
    cli_returncode: int | None = None
    input_duplicated: int = 0
    """Records written twice to the input topic by a producer (not the pipeline's doing)."""
    input_duplicated_acked: int = 0
    delivery: str = "at-least-once"
    aborted: int = 0
    """Output and dead-letter records of aborted transactions (seen by read_uncommitted only)."""

    @property
    def lost(self) -> int:
        return self.reconciliation.lost + self.acked_missing

    def report(self) -> None:
        """Print the result in a test's output: its figures, then its one-line errors and
        notes (the benchmark prints :meth:`row` in a table instead)."""
        r = self.reconciliation
        aborted = (
            f" aborted (read_uncommitted) {self.aborted}" if self.delivery == "exactly-once" else ""
        )
        print(
            f"\n{self.scenario} [{self.delivery}]: in {r.records_in} out {r.out} "
            f"dead-lettered {r.dead_lettered} duplicated {r.duplicated} "
            f"(bound {self.duplicate_bound}) lost {self.lost} acked {self.acked}{aborted} "
            f"in {self.seconds:.0f} s; input records written twice by a producer "
            f"{self.input_duplicated} (acknowledged {self.input_duplicated_acked})"
        )
        for who, line in self.errors.items():
            print(f"  {who}: {line}")
        for note in self.notes:
            print(f"  {note}")

    def row(self) -> str:
        r = self.reconciliation
        aborted = f"{self.aborted:,}" if self.delivery == "exactly-once" else "-"
        return (
            f"| {self.scenario} | {self.delivery} | {r.records_in:,} | {r.out:,} | "
            f"{r.dead_lettered:,} | {r.duplicated:,} (bound {self.duplicate_bound:,}) | "
            f"{self.lost} | {aborted} |"
        )


TABLE_HEADER = (
    "| scenario | delivery | records in | out | dead-lettered | duplicated | lost "
    "| aborted (read_uncommitted) |\n"
    "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |"
)


def _finish(
    scenario: str,
    bootstrap: str,
    names: dict[str, str],
    checkpoint: Path,
    in_flight: set[int],
    loads: list[Load],
    started: float,
    delivery: str = "at-least-once",
) -> FaultResult:
    admin = KafkaAdmin({"bootstrap.servers": bootstrap}, timeout_s=30)
    isolation = "read_committed" if delivery == "exactly-once" else None
    try:
        rec = reconcile_topics(admin, names["purchases"], names["output"], names["dlq"], isolation)
        keys = [m.key() for m in admin.read_all(names["purchases"])]
        aborted = aborted_records(admin, [names["output"], names["dlq"]], delivery)
    finally:
        admin.close()
    present = set(keys)
    acked = [k for load in loads for k in load.acked]
    missing = sum(1 for k in acked if k not in present)
    # Generated keys are unique: a key twice in the input was written twice by a producer.
    twice = {k for k, n in Counter(keys).items() if n > 1}
    bound = sum(batch_records(checkpoint, names["purchases"], b) for b in in_flight)
    return FaultResult(
        scenario,
        rec,
        bound,
        time.monotonic() - started,
        acked=len(acked),
        acked_missing=missing,
        input_duplicated=len(keys) - len(present),
        input_duplicated_acked=sum(1 for k in acked if k in twice),
        delivery=delivery,
        aborted=aborted,
    )


def aborted_records(admin: KafkaAdmin, topics: list[str], delivery: str) -> int:
    """Records of ``topics`` a read_uncommitted reader sees and a read_committed one does not
    (those of aborted transactions); 0 for at-least-once output."""
    if delivery != "exactly-once":
        return 0
    seen = 0
    for topic in topics:
        seen += len(admin.read_all(topic, isolation="read_uncommitted"))
        seen -= len(admin.read_all(topic, isolation="read_committed"))
    return seen


# --- scenario a: the partitions' leader SIGKILLed mid-run, restarted later ---------------------


def leader_killed(
    cluster: embedded.Broker,
    workdir: Path,
    *,
    purchases: int = 24_000,
    rate: float = 3_000,
    products: int = 2_000,
    partitions: int = 3,
    down_s: float = 8.0,
    max_offsets: int = 10_000,
    timeout_s: float = 240,
    delivery: str = "at-least-once",
) -> FaultResult:
    """SIGKILL node 1 (leader of every partition of the run's topics) when about a third of
    the load is acknowledged and the pipeline has processed batches; restart it ``down_s``
    later; the load goes on throughout; then reconcile."""
    started = time.monotonic()
    bootstrap, data_dir = cluster.bootstrap, cluster.data_dir
    prefix = f"fa-{uuid.uuid4().hex[:6]}"
    names = create_topics(bootstrap, prefix, partitions)
    load_referential(bootstrap, names["referential"], products, seed=1)
    checkpoint = workdir / f"{prefix}-checkpoint"
    pipeline = PipelineProcess(
        bootstrap,
        checkpoint,
        prefix,
        workdir / f"{prefix}.log",
        max_offsets=max_offsets,
        delivery=delivery,
    )
    in_flight: set[int] = set()
    result_errors: dict[str, str] = {}
    try:
        wait_until(
            "the pipeline to start",
            lambda: (
                any(line.startswith("started") for line in pipeline.lines) or not pipeline.alive
            ),
            timeout_s,
        )
        load = Load(
            bootstrap, names["purchases"], count=purchases, rate=rate, seed=11, products=products
        ).start()
        wait_until(
            "a third of the load and a processed batch",
            lambda: (load.done >= purchases // 3 and pipeline.batches() > 0) or not pipeline.alive,
            timeout_s,
        )
        watch = InFlight(checkpoint).start()
        try:
            embedded.stop_node(data_dir, LEADER, kill=True)
            time.sleep(down_s)
            embedded.start_node(data_dir, LEADER)
            load.join(timeout_s)
            wait_until(
                "the pipeline to catch up",
                lambda: caught_up(checkpoint, bootstrap, names["purchases"]) or not pipeline.alive,
                timeout_s,
            )
        finally:
            in_flight |= watch.stop(0.0)  # polled from the kill to the catch-up
        code = pipeline.stop()
        if pipeline.error():
            result_errors["pipeline"] = pipeline.error() or ""
        if load.error:
            result_errors["load"] = load.error
        restore(data_dir, bootstrap, list(names.values()))
        result = _finish(
            "leader SIGKILLed, restarted",
            bootstrap,
            names,
            checkpoint,
            in_flight,
            [load],
            started,
            delivery,
        )
        result.errors = result_errors
        result.notes.append(f"pipeline exit {code}, {pipeline.batches()} batches")
        result.notes.append(f"load: {len(load.acked)} acked, {load.failed} failed")
        return result
    finally:
        if pipeline.alive:
            pipeline.kill()
        restore(data_dir, bootstrap, list(names.values()))


# --- scenario b: two brokers down, errors, recovery when one returns ----------------------------


def generator_cli(bootstrap: str, topic: str, count: int, seed: int, delivery_s: float) -> Any:
    """``streamscale generate purchases`` in a child process (as a user runs it)."""
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "streamscale.cli.main",
            "generate",
            "purchases",
            "--bootstrap",
            bootstrap,
            "--topic",
            topic,
            "--count",
            str(count),
            "--rate",
            "1000",
            "--seed",
            str(seed),
            "--products",
            "100",
            "--delivery-timeout",
            str(delivery_s),
            "--no-progress",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def two_brokers_down(
    cluster: embedded.Broker,
    workdir: Path,
    *,
    backlog: int = 20_000,
    live: int = 3_000,
    after: int = 4_000,
    products: int = 2_000,
    partitions: int = 3,
    max_offsets: int = 2_000,
    delivery_s: float = 8.0,
    sink_delivery_s: float = 10.0,
    timeout_s: float = 240,
) -> FaultResult:
    """With a backlog in the input, SIGKILL nodes 2 and 3 (node 1, the leader, is the one
    in-sync replica left; the KRaft quorum is lost with them): a live generator, the project's
    generator CLI and the pipeline's sink must each fail with one clear line, nothing they saw
    acknowledged lost. Node 2 returns; the pipeline restarts from its checkpoint, a new load
    is taken, the pipeline catches up; node 3 returns; reconcile."""
    started = time.monotonic()
    bootstrap, data_dir = cluster.bootstrap, cluster.data_dir
    prefix = f"fb-{uuid.uuid4().hex[:6]}"
    names = create_topics(bootstrap, prefix, partitions)
    load_referential(bootstrap, names["referential"], products, seed=2)
    first = Load(
        bootstrap, names["purchases"], count=backlog, rate=1e9, seed=21, products=products
    ).start()
    first.join(timeout_s)
    checkpoint = workdir / f"{prefix}-checkpoint"
    opts = {"max_offsets": max_offsets, "delivery_timeout_ms": int(sink_delivery_s * 1000)}
    log = workdir / f"{prefix}.log"
    pipeline = PipelineProcess(bootstrap, checkpoint, prefix, log, **opts)
    restarted: PipelineProcess | None = None
    in_flight: set[int] = set()
    errors: dict[str, str] = {}
    notes: list[str] = [f"backlog in at {time.monotonic() - started:.0f} s"]
    try:
        wait_until(
            "a processed batch", lambda: pipeline.batches() > 0 or not pipeline.alive, timeout_s
        )
        live_load = Load(
            bootstrap,
            names["purchases"],
            count=live,
            rate=500,
            seed=22,
            products=products,
            delivery_timeout_ms=int(delivery_s * 1000),
        ).start()
        time.sleep(1.0)
        watch = InFlight(checkpoint).start()
        try:
            for node in (2, 3):
                embedded.stop_node(data_dir, node, kill=True)
            cli = generator_cli(bootstrap, names["purchases"], 200, 23, delivery_s)
            wait_until("the pipeline to fail", lambda: not pipeline.alive, timeout_s)
        finally:
            in_flight |= watch.stop(0.0)  # polled from the kills to the pipeline's failure
        notes.append(f"pipeline failed at {time.monotonic() - started:.0f} s")
        pipeline.stop()
        sink_error = pipeline.error()
        if sink_error:
            errors["pipeline"] = sink_error
        cli_out, cli_err = cli.communicate(timeout=timeout_s)
        errors["generator CLI"] = cli_err.strip()
        notes.append(f"generator CLI stdout {cli_out.strip()!r}")
        live_load.join(timeout_s)
        errors["live load"] = (
            f"{live_load.failed} of {live} not acknowledged: {live_load.first_error}"
        )

        embedded.start_node(data_dir, 2)
        wait_until("node 2 back", lambda: embedded.answers_metadata(bootstrap) >= 2, timeout_s)
        notes.append(f"node 2 back at {time.monotonic() - started:.0f} s")
        # The replayed batch keeps its logged offsets; the later ones may be larger.
        restarted = PipelineProcess(
            bootstrap, checkpoint, prefix, log, **{**opts, "max_offsets": 10 * max_offsets}
        )
        recovery = Load(
            bootstrap,
            names["purchases"],
            count=after,
            rate=2_000,
            seed=24,
            products=products,
        ).start()
        recovery.join(timeout_s)
        wait_until(
            "the restarted pipeline to catch up",
            lambda: caught_up(checkpoint, bootstrap, names["purchases"]) or not restarted.alive,
            timeout_s,
        )
        notes.append(f"caught up at {time.monotonic() - started:.0f} s")
        code = restarted.stop()
        if restarted.error():
            errors["restarted pipeline"] = restarted.error() or ""
        notes.append(f"restarted pipeline exit {code}, {restarted.batches()} batches")
        restore(data_dir, bootstrap, list(names.values()))
        result = _finish(
            "two brokers down, one returns",
            bootstrap,
            names,
            checkpoint,
            in_flight,
            [first, live_load, recovery],
            started,
        )
        result.errors = errors
        result.notes = notes
        result.notes.append(f"recovery load: {len(recovery.acked)} acked, {recovery.failed} failed")
        result.cli_returncode = cli.returncode
        return result
    finally:
        for proc in (pipeline, restarted):
            if proc is not None and proc.alive:
                proc.kill()
        restore(data_dir, bootstrap, list(names.values()))


# --- exact records in, records out (the fuzz tests) ------------------------------------------


def send_exact(
    bootstrap: str,
    topic: str,
    records: list[tuple[str | bytes | None, str | bytes | None, int, int]],
) -> list[tuple[int, int]]:
    """Produce ``(key, value, timestamp ms, partition)`` records in order with the reliable
    producer, one acknowledged before the next; their ``(partition, offset)``."""
    from confluent_kafka import Producer

    from streamscale.kafka.client import producer_config

    acked: list[tuple[int, int]] = []
    errors: list[str] = []

    def report(err: Any, msg: Any) -> None:
        if err is not None:
            errors.append(err.str())
        else:
            acked.append((msg.partition(), msg.offset()))

    producer = Producer(
        producer_config(
            {"bootstrap.servers": bootstrap},
            on_delivery=report,
            **{"linger.ms": 0, "message.max.bytes": 2_000_000},
        )
    )
    for key, value, ts, partition in records:
        producer.produce(topic, value=value, key=key, timestamp=ts, partition=partition)
        producer.flush(10)
    if producer.flush(30) or errors:
        raise ScenarioError(f"could not produce to {topic}: {errors[:3]}")
    return acked


def read_topic(bootstrap: str, topic: str) -> list[Any]:
    """Every record of ``topic`` up to its end offsets now (librdkafka messages)."""
    admin = KafkaAdmin({"bootstrap.servers": bootstrap}, timeout_s=30)
    try:
        return admin.read_all(topic)
    finally:
        admin.close()
