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

``--autoscale MIN:MAX`` (with a ``spark://`` master) runs it as ``streamscale run
--autoscale`` does, through the library: the Spark settings of :func:`~streamscale.autoscale.
runtime.elastic_conf` and the autoscaler of :func:`~streamscale.autoscale.runtime.
start_autoscaler` on the lag monitor's tracker, its decisions in ``--decision-log``
(the multi-host tests, tests/integration/hosts). ``--conf K=V,K=V`` adds Spark settings.
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

_SAY = threading.Lock()


def say(line: str) -> None:
    """One whole line to stdout: the batch lines, the command answers and the kill notices
    come from different threads, and ``print`` writes a text and its newline separately, so
    an answer could land inside another line and never be read as one."""
    with _SAY:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()


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


KILL_POINTS = ("batch-start", "state", "tasks", "before-commit", "committed")
"""Where ``--kill-at`` kills the driver, in the order a micro-batch passes them:

- ``batch-start``: the batch's offsets are in the offset log, nothing else is done;
- ``state``: in the batch's stage after the shuffle, once a task has handed its first named
  purchases to the producer: the table operator ran in that task, its new state version is
  not committed (local mode: tasks run in the driver's JVM; the Python worker kills the
  driver's process group);
- ``tasks``: while any task of the batch's job runs (parse and dead letters, or the state
  stage), at a random moment of the job;
- ``before-commit``: every output record is written, the batch is not in the commit log;
- ``committed``: the batch's commit file is written (offsets to the consumer group may not).
"""


def die(point: str, batch_id: int) -> None:
    """SIGKILL this process group: the driver's Python, its JVM and its Python workers."""
    say(f"killing at {point} batch {batch_id}")
    os.killpg(0, signal.SIGKILL)
    time.sleep(60)  # never reached


def arm(pipeline: Any, spark: Any, point: str, first_batch: int, seed: int) -> None:
    """Make the driver SIGKILL itself at ``point`` of the first batch >= ``first_batch``."""
    from streamscale.pipelines import enrichment

    armed: list[int] = []
    rng = random.Random(seed)
    current = {"batch": -1}
    original = pipeline.process_batch

    def process_batch(batch: Any, batch_id: int) -> None:
        current["batch"] = batch_id
        hit = batch_id >= first_batch
        if hit and point == "batch-start":
            die(point, batch_id)
        if hit and point == "tasks":  # the batch's job starts in ``original``
            threading.Thread(target=kill_in_job, args=(batch_id,), daemon=True).start()
        if hit and point == "state" and not armed:
            say(f"killing at {point} batch {batch_id}")
            armed.append(batch_id)
            enrichment.WriteTask = dying_write()  # type: ignore[misc]
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

    pipeline.process_batch = process_batch


def dying_write() -> Any:
    """A write task that, once it has handed its first named purchases to the producer,
    SIGKILLs the driver's process group and its own (the state stage of a local driver: the
    table operator ran in the same task, its new state version not committed). Pickled by
    value from this script to the Python workers, which run in a process group of their own."""
    from streamscale.pipelines import enrichment

    driver_group = os.getpgid(0)

    class DyingWrite(enrichment.WriteTask):
        def __call__(self, batches: Any) -> Any:
            def then_die() -> Any:
                for batch in batches:
                    yield batch
                    os.killpg(driver_group, signal.SIGKILL)
                    os.killpg(0, signal.SIGKILL)

            yield from super().__call__(then_die())

    return DyingWrite


def slow_tasks(delay_s: float) -> None:
    """Every write task of the enrichment (the stage after the shuffle, which runs the table
    operator; the purchases' stage has no Python task to slow) sleeps ``delay_s`` first (the
    task object is pickled by value from this script, so the executors run this subclass)."""
    from streamscale.pipelines import enrichment

    class SlowTask(enrichment.WriteTask):
        def __call__(self, batches: Any) -> Any:
            import time as clock

            clock.sleep(delay_s)
            yield from super().__call__(batches)

    enrichment.WriteTask = SlowTask  # type: ignore[misc]


def control(spark: Any, stream: Any) -> None:
    """Answer fault commands read from ``stream``, one line each (the pipeline runs on)."""
    from streamscale.autoscale.actuator import SparkActuator

    actuator = SparkActuator(spark)
    actuator.lost()  # learns the executors gone before: ``lost`` then names those gone since
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
                say(f"busy {busy.id} {app_id} active {busy.active_tasks}")
            elif words[0] == "remove-busy-executor":
                # Every executor runs a task of the batch: whichever the actuator removes
                # (idle first, then the least busy) is busy.
                states = wait_busy(actuator, every=True)
                result = actuator.apply(int(words[1]))
                active = {e.id: e.active_tasks for e in states}
                say(
                    f"removed {','.join(result.killed) or '-'} running tasks "
                    f"{','.join(str(active.get(k, '?')) for k in result.killed)} "
                    f"ok {result.ok} error {result.error}",
                )
            elif words[0] == "apply":
                result = actuator.apply(int(words[1]))
                say(f"applied {result.target} ok {result.ok} error {result.error}")
            elif words[0] == "lost":
                # Executors gone since the last ask that the actuator did not remove.
                gone = actuator.lost()
                say("lost " + ("|".join(f"{g.id}={g.reason}" for g in gone) or "-"))
            elif words[0] == "executors":
                ids = actuator.executor_ids()
                say(f"executors {len(ids)} {','.join(ids)} {app_id}")
            elif words[0] == "executor-hosts":
                # Where each executor runs (its host:port, as it registered with the driver).
                found = " ".join(f"{e.id}@{e.host_port}" for e in actuator.executors())
                say(f"hosts {found or '-'}")
            else:
                say(f"unknown command {words[0]}")
        except Exception as exc:  # one line to the caller, the pipeline runs on
            say(f"command failed: {first_error_line(str(exc))}")


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
    parser.add_argument("--autoscale", help="MIN:MAX executors, driven by the autoscaler")
    parser.add_argument("--autoscale-interval", type=float, default=2.0)
    parser.add_argument("--policy", default="rate", choices=("rate", "lag"))
    parser.add_argument("--lag-threshold", type=float, default=10_000.0)
    parser.add_argument("--window", type=float, default=10.0, help="stabilization window (s)")
    parser.add_argument("--decision-log", type=Path)
    parser.add_argument("--conf", default="", help="KEY=VALUE[,KEY=VALUE...] Spark settings")
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
    options = None
    if args.autoscale:
        from streamscale.autoscale.policy import PolicyKind
        from streamscale.autoscale.runtime import AutoscaleOptions, elastic_conf

        low, high = (int(n) for n in args.autoscale.split(":"))
        options = AutoscaleOptions(
            min_executors=low,
            max_executors=high,
            interval_s=args.autoscale_interval,
            stabilization_window_s=args.window,
            decision_log=args.decision_log,
            policy=PolicyKind(args.policy),
            lag_threshold=args.lag_threshold,
        )
        extra |= elastic_conf(args.master, options) | {"spark.executor.memory": "512m"}
    elif args.master.startswith("spark://"):
        extra |= app_conf(args.master, args.max_executors, executor_memory="512m")
    extra |= dict(item.split("=", 1) for item in args.conf.split(",") if item)
    # The driver's quiet log (executors lost, tasks lost) next to the checkpoint.
    log_file = Path(args.checkpoint).parent / f"{args.prefix}-spark-driver.log"
    spark = session(settings, app_name="streamscale-faults", extra_conf=extra, log_file=log_file)
    scaler = None
    try:
        if options is not None:
            from streamscale.autoscale.runtime import start_autoscaler
            from streamscale.lag import start_monitor

            monitor = start_monitor(spark, port=None)
            controller = start_autoscaler(spark, None, monitor.tracker, options, settings=settings)
            scaler = (controller, monitor)
            host = spark.conf.get("spark.driver.host")
            say(f"autoscaler on {low}-{high}, driver at {host}")
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
            say(f"started {query.id}")
            try:
                drive(query, pipeline, stop_request.event, say)
            except Exception as exc:  # awaitTermination raises the query's failure
                say(f"error: {first_error_line(str(exc))}")
                return 1
        error = query.exception()
        if error is not None:
            say(f"error: {first_error_line(str(error))}")
            return 1
        say("stopped")
        return 0
    finally:
        if scaler is not None:
            scaler[0].stop()
            scaler[1].stop()
        stop(spark)


if __name__ == "__main__":
    sys.exit(main())
