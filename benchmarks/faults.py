"""Broker faults during real enrichment runs, the long versions of the fault tests (issue 13).

Starts its own three-node Apache Kafka cluster on 127.0.0.1 (KRaft, RF 3, min ISR 2) in a
temporary directory, runs each scenario of ``tests/integration/faults/scenarios.py`` (the
same code as the tests, with larger loads and longer outages), and prints the table of
``docs/faults.md``: records in, out, dead-lettered, duplicated (with the bound: the records of
the micro-batches in flight at the fault or when the pipeline failed) and lost (must be 0),
then each scenario's one-line errors as printed. Everything it starts is stopped by PID.

    .venv/bin/python benchmarks/faults.py                 # long runs, 4-6 minutes
    .venv/bin/python benchmarks/faults.py --quick         # the test-sized runs

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

from streamscale.kafka import broker as embedded

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
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="the test-sized runs")
    args = parser.parse_args()
    results: list[FaultResult] = []
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="streamscale-faults-") as tmp:
        work = Path(tmp)
        with embedded.embedded_broker(work / "cluster", nodes=3) as cluster:
            print(f"cluster {cluster.bootstrap}", flush=True)
            leader_opts = {} if args.quick else LONG["leader"]
            results.append(leader_killed(cluster, work, **leader_opts, timeout_s=900))
            print(f"done: {results[-1].scenario} in {results[-1].seconds:.0f} s", flush=True)
            down_opts = {} if args.quick else LONG["two_down"]
            results.append(two_brokers_down(cluster, work, **down_opts, timeout_s=900))
            print(f"done: {results[-1].scenario} in {results[-1].seconds:.0f} s", flush=True)
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
        or r.reconciliation.unexpected
        or r.input_duplicated_acked
    ]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
