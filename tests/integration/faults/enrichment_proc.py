"""The enrichment pipeline as its own process, for fault runs: the library equivalent of
``streamscale run enrichment`` on topics named ``<prefix>-achats`` etc., with the sink's
``delivery.timeout.ms`` settable (a broker outage then fails the sink within the test's time).

Prints one line per micro-batch (:func:`streamscale.pipelines.runner.drive`), then
``stopped`` on SIGTERM/SIGINT (after the batch in flight commits), or ``error: <one line>``
and exit status 1 if the query fails.

    python enrichment_proc.py BOOTSTRAP CHECKPOINT PREFIX [--max-offsets N]
        [--trigger-ms MS] [--delivery-timeout-ms MS] [--master spark://...]
        [--kill-at POINT --kill-batch N] [--delivery exactly-once]

Spark-side faults (:mod:`spark_faults`): ``--master spark://...`` runs the driver on a
standalone cluster (executors of one core, ``--max-executors``) and reads fault commands on
stdin (``kill-busy-executor``, ``remove-busy-executor N``, ``apply N``), each answered by
one line; ``--kill-at POINT`` SIGKILLs this driver (its whole process group: the Python
driver, its JVM and its Python workers) at a named point of the first batch numbered
``--kill-batch`` or later (:data:`KILL_POINTS`), after printing ``killing at POINT batch N``.
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

from streamscale.kafka.client import first_error_line
from streamscale.pipelines.enrichment import Enrichment, EnrichmentTopics
from streamscale.pipelines.runner import StopRequest, drive
from streamscale.settings import Settings


class FaultSettings(Settings):
    """The project's settings with the sink producer's delivery timeout set."""

    delivery_timeout_ms: int = 120_000

    def source_options(self) -> dict[str, str]:
        return {
            **super().source_options(),
            "kafka.delivery.timeout.ms": str(self.delivery_timeout_ms),
        }


def topics(prefix: str) -> EnrichmentTopics:
    return EnrichmentTopics(
        purchases=f"{prefix}-achats",
        referential=f"{prefix}-referentiel",
        output=f"{prefix}-achats-enrichis",
        dlq=f"{prefix}-enrichment-dlq",
    )


KILL_POINTS = ("batch-start", "table", "referential", "tasks", "before-commit", "committed")
"""Where ``--kill-at`` kills the driver, in the order a micro-batch passes them:

- ``batch-start``: the batch's offsets are in the offset log, nothing else is done;
- ``table``: while the driver updates its referential table (in :meth:`Table.apply`: the
  rebuild from the compacted topic after a restart, or the batch's own versions at its end);
- ``referential``: the batch's referential records are read (their dead letters not yet written),
  no purchase task has started;
- ``tasks``: while the batch's purchase tasks run (and write output), at a random moment of
  the job;
- ``before-commit``: every output record is written, the batch is not in the commit log;
- ``committed``: the batch's commit file is written (offsets to the consumer group may not).
"""


def die(point: str, batch_id: int) -> None:
    """SIGKILL this process group: the driver's Python, its JVM and its Python workers."""
    print(f"killing at {point} batch {batch_id}", flush=True)
    os.killpg(0, signal.SIGKILL)
    time.sleep(60)  # never reached


def arm(pipeline: Any, spark: Any, point: str, first_batch: int, seed: int) -> None:
    """Make the driver SIGKILL itself at ``point`` of the first batch >= ``first_batch``."""
    from streamscale.pipelines import enrichment

    rng = random.Random(seed)
    current = {"batch": -1}
    original = pipeline.process_batch

    def target(batch_id: int) -> bool:
        return batch_id >= first_batch and current["batch"] == batch_id

    def process_batch(batch: Any, batch_id: int) -> None:
        current["batch"] = batch_id
        hit = batch_id >= first_batch
        if hit and point == "batch-start":
            die(point, batch_id)
        original(batch, batch_id)
        if hit and point == "before-commit":
            die(point, batch_id)
        if hit and point == "committed":
            threading.Thread(target=kill_when_committed, args=(batch_id,), daemon=True).start()

    def kill_in_job(batch_id: int) -> None:
        tracker = spark.sparkContext.statusTracker()
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            for job in tracker.getActiveJobsIds():
                info = tracker.getJobInfo(job)
                stages = [tracker.getStageInfo(s) for s in (info.stageIds if info else [])]
                if any(s is not None and s.numActiveTasks > 0 for s in stages):
                    time.sleep(rng.uniform(0.0, 0.3))
                    die(point, batch_id)
            time.sleep(0.005)

    def kill_when_committed(batch_id: int) -> None:
        commit = os.path.join(pipeline.checkpoint, "commits", str(batch_id))
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if os.path.exists(commit):
                die(point, batch_id)
            time.sleep(0.001)

    if point == "table":
        apply = enrichment.Table.apply

        def table_apply(self: Any, rows: Any) -> None:
            if rows and current["batch"] >= first_batch:
                half = len(rows) // 2
                apply(self, rows[:half])  # the table half updated
                die(point, current["batch"])
            apply(self, rows)

        enrichment.Table.apply = table_apply  # type: ignore[method-assign]
    read = enrichment.read_referential

    def read_referential(*args: Any, **kwargs: Any) -> Any:
        found = read(*args, **kwargs)
        if target(current["batch"]) and len(args) >= 5:  # the batch's own range, read
            if point == "referential":
                die(point, current["batch"])
            if point == "tasks":  # the purchases job of the batch comes next
                threading.Thread(target=kill_in_job, args=(current["batch"],), daemon=True).start()
        return found

    enrichment.read_referential = read_referential
    pipeline.process_batch = process_batch


def slow_tasks(delay_s: float) -> None:
    """Every task of the enrichment's purchases job sleeps ``delay_s`` first (the task object
    is pickled by value from this script, so the executors run this subclass)."""
    from streamscale.pipelines import enrichment

    class SlowTask(enrichment.EnrichTask):
        def __call__(self, batches: Any) -> Any:
            import time as clock

            clock.sleep(delay_s)
            yield from super().__call__(batches)

    enrichment.EnrichTask = SlowTask  # type: ignore[misc]


def control(spark: Any, stream: Any) -> None:
    """Answer fault commands read from ``stream``, one line each (the pipeline runs on)."""
    from streamscale.autoscale.actuator import SparkActuator

    actuator = SparkActuator(spark)
    app_id = spark.sparkContext.applicationId
    for line in stream:
        words = line.split()
        if not words:
            continue
        try:
            if words[0] == "busy-executor":
                # The executor running a task of the batch in flight, with the app id: the
                # caller finds its JVM (CoarseGrainedExecutorBackend) and SIGKILLs it.
                busy = wait_busy(actuator)[0]
                print(f"busy {busy.id} {app_id} active {busy.active_tasks}", flush=True)
            elif words[0] == "remove-busy-executor":
                # Every executor runs a task of the batch: whichever the actuator removes
                # (idle first, then the least busy) is busy.
                states = wait_busy(actuator, every=True)
                result = actuator.apply(int(words[1]))
                active = {e.id: e.active_tasks for e in states}
                print(
                    f"removed {','.join(result.killed) or '-'} running tasks "
                    f"{','.join(str(active.get(k, '?')) for k in result.killed)} "
                    f"ok {result.ok} error {result.error}",
                    flush=True,
                )
            elif words[0] == "apply":
                result = actuator.apply(int(words[1]))
                print(f"applied {result.target} ok {result.ok} error {result.error}", flush=True)
            elif words[0] == "executors":
                ids = actuator.executor_ids()
                print(f"executors {len(ids)} {','.join(ids)} {app_id}", flush=True)
            else:
                print(f"unknown command {words[0]}", flush=True)
        except Exception as exc:  # one line to the caller, the pipeline runs on
            print(f"command failed: {first_error_line(str(exc))}", flush=True)


def wait_busy(actuator: Any, *, every: bool = False, timeout_s: float = 120.0) -> Any:
    """Executors running a task (polled every 5 ms), busiest first: once one is (or, with
    ``every``, once all are)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        states = actuator.executors()
        busy = [e for e in states if e.active_tasks > 0]
        if busy and (not every or len(busy) == len(states)):
            return sorted(busy, key=lambda e: -e.active_tasks)
        time.sleep(0.005)
    raise TimeoutError(f"no executor ran a task within {timeout_s:.0f} s")


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("bootstrap")
    parser.add_argument("checkpoint")
    parser.add_argument("prefix")
    parser.add_argument("--max-offsets", type=int, default=20_000)
    parser.add_argument("--trigger-ms", type=int, default=500)
    parser.add_argument("--delivery-timeout-ms", type=int, default=120_000)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--delivery", default="at-least-once")
    parser.add_argument("--max-executors", type=int, default=2)
    parser.add_argument("--kill-at", choices=KILL_POINTS)
    parser.add_argument("--kill-batch", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--task-delay-ms",
        type=int,
        default=0,
        help="every enrichment task first sleeps this long: a fault aimed at a running task "
        "strikes one (tasks of small batches otherwise end within milliseconds)",
    )
    args = parser.parse_args()

    from streamscale.spark import session, stop

    settings = FaultSettings(
        bootstrap_servers=args.bootstrap,
        spark_master=args.master,
        shuffle_partitions=2,
        max_offsets_per_trigger=args.max_offsets,
        starting_offsets="earliest",
        metrics_port=-1,
        delivery_timeout_ms=args.delivery_timeout_ms,
        delivery=args.delivery,
    )
    from streamscale.cluster import QUICK_JVM, app_conf

    # A fault run's driver lives for seconds: it starts on less CPU (the same code). Its
    # executors keep the defaults: the executor faults aim at tasks they run.
    extra = {"spark.driver.extraJavaOptions": QUICK_JVM}
    if args.master.startswith("spark://"):
        extra |= app_conf(args.master, args.max_executors, executor_memory="512m")
    # The driver's quiet log (executors lost, tasks lost) next to the checkpoint.
    log_file = Path(args.checkpoint).parent / f"{args.prefix}-spark-driver.log"
    spark = session(settings, app_name="streamscale-faults", extra_conf=extra, log_file=log_file)
    try:
        if args.task_delay_ms > 0:
            slow_tasks(args.task_delay_ms / 1000)
        pipeline = Enrichment(settings, args.checkpoint, topics(args.prefix))
        if args.kill_at:
            arm(pipeline, spark, args.kill_at, args.kill_batch, args.seed)
        if args.master.startswith("spark://"):
            threading.Thread(target=control, args=(spark, sys.stdin), daemon=True).start()
        trigger = {"processingTime": f"{args.trigger_ms} milliseconds"}
        with StopRequest() as stop_request:
            query = pipeline.start(spark, trigger)
            print(f"started {query.id}", flush=True)
            try:
                drive(query, pipeline, stop_request.event, lambda line: print(line, flush=True))
            except Exception as exc:  # awaitTermination raises the query's failure
                print(f"error: {first_error_line(str(exc))}", flush=True)
                return 1
        error = query.exception()
        if error is not None:
            print(f"error: {first_error_line(str(error))}", flush=True)
            return 1
        print("stopped", flush=True)
        return 0
    finally:
        stop(spark)


if __name__ == "__main__":
    sys.exit(main())
