"""Broker and Spark faults during real enrichment runs, the long versions of the fault tests
(issue 13).

Starts its own three-node Apache Kafka cluster on 127.0.0.1 (KRaft, RF 3, min ISR 2) and, for
the executor faults, a standalone Spark cluster (two executors of one core) in a temporary
directory, runs each scenario of ``tests/integration/faults/scenarios.py`` and
``spark_scenarios.py`` (the same code as the tests, with larger loads, longer outages and
more kill points), and prints the table of ``docs/faults.md``: records in, out,
dead-lettered, duplicated (with the bound: the records of the micro-batches in flight at the
fault or when the pipeline failed) and lost (must be 0), then each scenario's one-line errors
and notes. Everything it starts is stopped by PID.

    .venv/bin/python benchmarks/faults.py                 # long runs, 12-20 minutes
    .venv/bin/python benchmarks/faults.py --quick         # the test-sized runs
    .venv/bin/python benchmarks/faults.py --only executor,driver   # some families
    .venv/bin/python benchmarks/faults.py --hosts         # on hosts of their own (root), ~8 min
    .venv/bin/python benchmarks/faults.py --hosts --quick # the multi-host tests' sizes
    .venv/bin/python benchmarks/faults.py --delivery both  # at-least-once and exactly-once

``--hosts`` runs the scenarios of ``tests/integration/hosts/host_scenarios.py`` instead: three
brokers, a Spark Master, two Workers and the driver each in a network namespace of its own
(root and ``ip`` needed), the enrichment pipeline with the autoscaler under a burst, a worker's
host cut off mid-batch, the brokers' leader cut off from the others, a worker's host lost.


With ``--delivery exactly-once`` (or ``both``) the pipeline writes in Kafka transactions
(issue 25): outputs are read back ``read_committed`` and must hold no duplicate; the records
of aborted transactions (seen by ``read_uncommitted`` only) are counted. The two-brokers-down
scenario runs at-least-once only.

Exit status 1 if anything was lost or duplicates exceed their bound.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "integration" / "faults"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "integration" / "hosts"))

from scenarios import (
    TABLE_HEADER,
    FaultResult,
    leader_killed,
    two_brokers_down,
)
from spark_scenarios import KILL_POINTS, driver_kills, executor_faults

from streamscale import cluster as standalone
from streamscale.kafka import broker as embedded

FAMILIES = ("broker", "executor", "driver")

LONG = {
    "leader": {"purchases": 150_000, "rate": 5_000, "down_s": 30.0, "max_offsets": 20_000},
    "two_down": {
        "backlog": 100_000,
        "live": 10_000,
        "after": 40_000,
        "max_offsets": 5_000,
        "delivery_s": 20.0,
        "sink_delivery_s": 30.0,
    },
    "executor": {"purchases": 30_000, "rate": 3_000, "max_offsets": 5_000},
    "driver": {
        # Every named point, a random kill after each of the first four.
        "plan": tuple(
            step for i, point in enumerate(KILL_POINTS) for step in (point, "random")[: 2 - (i > 3)]
        ),
        "purchases": 5_000,  # per run: a new load for each run of the pipeline
        "rate": 1_000,
        "max_offsets": 1_000,
    },
}


HOSTS_QUICK = {
    "driver": {"task_delay_ms": 200, "max_offsets": 500, "window_s": 6},
    "autoscale": {"count": 5_000, "rate": 2_500},
    "worker_partition": {"count": 3_000, "rate": 250, "down_s": 15},
    "broker_partition": {"count": 3_000, "rate": 250, "down_s": 12},
    "worker_lost": {"count": 8_000, "rate": 1_000},
}
HOSTS_LONG = {
    "driver": {"task_delay_ms": 200, "max_offsets": 1_000, "window_s": 10},
    "autoscale": {"count": 30_000, "rate": 5_000},
    "worker_partition": {"count": 15_000, "rate": 500, "down_s": 30},
    "broker_partition": {"count": 15_000, "rate": 500, "down_s": 30},
    "worker_lost": {"count": 30_000, "rate": 3_000},
}


def run_hosts(work: Path, quick: bool, done: Callable[[FaultResult], None]) -> None:
    """The multi-host scenarios, on one harness and one driver, in the tests' order."""
    from cluster_hosts import hosts_cluster
    from host_scenarios import (
        autoscale,
        broker_partition,
        start_driver,
        stop_driver,
        worker_lost,
        worker_partition,
    )
    from netns import Network, unavailable

    reason = unavailable()
    if reason is not None:
        raise SystemExit(f"--hosts: {reason}")
    sizes = HOSTS_QUICK if quick else HOSTS_LONG
    timeout_s = 900
    with hosts_cluster(work / "hosts") as hosts:
        print(f"hosts: brokers {hosts.bootstrap}, master {hosts.master_url}", flush=True)
        driver = start_driver(hosts, **sizes["driver"], timeout_s=timeout_s)
        try:
            done(autoscale(driver, **sizes["autoscale"], timeout_s=timeout_s))
            for scenario in (worker_partition, broker_partition):
                done(scenario(driver, **sizes[scenario.__name__], timeout_s=timeout_s))
            done(worker_lost(driver, **sizes["worker_lost"], timeout_s=timeout_s))
        finally:
            stop_driver(driver)
    print(f"namespaces and links left: {Network().leftovers() or 'none'}", flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="the test-sized runs")
    parser.add_argument(
        "--hosts",
        action="store_true",
        help="the multi-host scenarios (network namespaces; root) instead of the families",
    )
    parser.add_argument(
        "--only", default=",".join(FAMILIES), help=f"scenario families: {', '.join(FAMILIES)}"
    )
    parser.add_argument(
        "--delivery",
        choices=("at-least-once", "exactly-once", "both"),
        default="at-least-once",
        help="the pipeline's output delivery (both: every scenario in each mode)",
    )
    args = parser.parse_args()
    deliveries = ["at-least-once", "exactly-once"] if args.delivery == "both" else [args.delivery]
    only = {f.strip() for f in args.only.split(",") if f.strip()}
    if only - set(FAMILIES):
        parser.error(f"unknown families {sorted(only - set(FAMILIES))}: choose from {FAMILIES}")
    results: list[FaultResult] = []
    driver_notes: list[str] = []
    started = time.monotonic()

    def done(result: FaultResult) -> None:
        results.append(result)
        print(f"done: {result.scenario} in {result.seconds:.0f} s", flush=True)

    with tempfile.TemporaryDirectory(prefix="streamscale-faults-") as tmp:
        work = Path(tmp)
        if args.hosts:
            run_hosts(work, args.quick, done)
            only = set()
        with (
            embedded.embedded_broker(work / "cluster", nodes=3)
            if only
            else contextlib.nullcontext()
        ) as cluster:
            if cluster is not None:
                print(f"cluster {cluster.bootstrap}", flush=True)
            if "broker" in only:
                leader_opts = {} if args.quick else LONG["leader"]
                for delivery in deliveries:
                    done(
                        leader_killed(
                            cluster, work, **leader_opts, timeout_s=900, delivery=delivery
                        )
                    )
                if "at-least-once" in deliveries:
                    down_opts = {} if args.quick else LONG["two_down"]
                    done(two_brokers_down(cluster, work, **down_opts, timeout_s=900))
            if "executor" in only:
                with standalone.local_cluster(
                    work / "spark", workers=1, cores=2, memory="1g"
                ) as spark_cluster:
                    opts = {} if args.quick else LONG["executor"]
                    for delivery in deliveries:
                        for result in executor_faults(
                            cluster, spark_cluster, work, **opts, timeout_s=900, delivery=delivery
                        ):
                            done(result)
            for delivery in deliveries if "driver" in only else []:
                opts = {} if args.quick else LONG["driver"]
                if args.quick:
                    opts = {"plan": ("before-commit", "tasks", "random")}
                run = driver_kills(cluster, work, **opts, timeout_s=900, delivery=delivery)
                done(run.result)
                notes: list[str] = []
                if run.reference is not None:
                    notes.append(f"reference check: {run.reference.summary()}")
                notes.append(
                    f"repeated output records differing from their first copy: "
                    f"{run.differing_copies}"
                )
                notes += [
                    f"killed at {k.point} in batch {k.batch} ({k.restart_s:.0f} s after its "
                    f"start), in flight {sorted(k.in_flight)}"
                    for k in run.kills
                ]
                run.result.notes += notes
                driver_notes += notes
    print()
    print(TABLE_HEADER)
    for result in results:
        print(result.row())
    print()
    for result in results:
        result.report()
    print(f"\ntotal {time.monotonic() - started:.0f} s")
    bad = [
        r
        for r in results
        if r.lost
        or r.reconciliation.duplicated > r.duplicate_bound
        or (r.delivery == "exactly-once" and r.reconciliation.duplicated > r.input_duplicated)
        or r.reconciliation.unexpected
        or r.input_duplicated_acked
        or "outside" in r.errors
    ]
    wrong = [note for note in driver_notes if note.startswith("reference check: NOT")]
    return 1 if bad or wrong else 0


if __name__ == "__main__":
    sys.exit(main())
