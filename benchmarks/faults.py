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
    .venv/bin/python benchmarks/faults.py --delivery both  # at-least-once and exactly-once

With ``--delivery exactly-once`` (or ``both``) the pipeline writes in Kafka transactions
(issue 25): outputs are read back ``read_committed`` and must hold no duplicate; the records
of aborted transactions (seen by ``read_uncommitted`` only) are counted. The two-brokers-down
scenario runs at-least-once only.

Exit status 1 if anything was lost or duplicates exceed their bound.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "integration" / "faults"))

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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="the test-sized runs")
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
        with embedded.embedded_broker(work / "cluster", nodes=3) as cluster:
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
        print(
            f"{result.scenario} ({result.seconds:.0f} s, {result.acked:,} records acknowledged; "
            f"{result.input_duplicated:,} input records written twice by a producer, "
            f"{result.input_duplicated_acked} of them acknowledged):"
        )
        for who, line in result.errors.items():
            print(f"  {who}: {line}")
        for note in result.notes:
            print(f"  {note}")
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
