"""JVM starts with and without the class archives `make setup` records, side by side in one run.

    .venv/bin/python benchmarks/jvm_start.py [--runs 5]

For each of (a) a one-node Kafka cluster (storage format, then the node, until it answers),
(b) a standalone Spark Master and Worker (until the Worker is registered) and (c) a local
Spark driver (the session, then a one-task job), prints the median over ``--runs`` of the
wall time and of the CPU its JVMs spent, without the archive and with it, and their ratio.
Each start runs in a child process, the two modes alternating, so both meet the same noise.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

KINDS = ("kafka", "spark cluster", "spark driver")


def jvm_cpu_s(pid: int) -> float:
    from streamscale import processes

    fields = processes.stat_fields(pid)
    if fields is None:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def waited_cpu_s() -> float:
    """CPU of the children this process has waited for (the storage format tool)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def child(kind: str, with_archive: bool) -> dict[str, float]:
    """One start of ``kind``; its wall time and the CPU of its JVMs."""
    from streamscale import class_archives

    if not with_archive:
        class_archives.use_options = lambda name: []  # type: ignore[assignment]
    tmp = Path(tempfile.mkdtemp(prefix="jvm-start-"))
    began = time.monotonic()
    if kind == "kafka":
        from streamscale.kafka import broker

        running = broker.start(None, tmp)
        wall = time.monotonic() - began
        cpu = jvm_cpu_s(running.pid) + waited_cpu_s()
        broker.stop(tmp, grace_s=0)
    elif kind == "spark cluster":
        from streamscale import cluster

        local = cluster.start(workers=1, cores=1, memory="1g", data_dir=tmp)
        wall = time.monotonic() - began
        cpu = sum(jvm_cpu_s(p) for p in (local.master_pid, *local.worker_pids))
        cluster.stop(tmp)
    else:
        from streamscale.settings import Settings
        from streamscale.spark import session, stop

        spark = session(
            Settings(spark_master="local[1]"),
            app_name="jvm-start",
            extra_conf={"spark.sql.warehouse.dir": str(tmp / "warehouse")},
            log_file=tmp / "driver.log",
        )
        spark.range(10).count()
        wall = time.monotonic() - began
        cpu = jvm_cpu_s(spark.sparkContext._gateway.proc.pid)  # type: ignore[attr-defined]
        stop(spark)
    return {"wall_s": wall, "cpu_s": cpu}


def measure(kind: str, with_archive: bool) -> dict[str, float]:
    argv = [sys.executable, __file__, "--child", kind]
    if with_archive:
        argv.append("--with-archive")
    done = subprocess.run(argv, capture_output=True, text=True, timeout=300, check=True)
    result: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--child", choices=KINDS)
    parser.add_argument("--with-archive", action="store_true")
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.with_archive)))
        return

    from streamscale import class_archives

    missing = [n for n in class_archives.NAMES if not class_archives.use_options(n)]
    if missing:
        sys.exit(f"no class archive for {', '.join(missing)}: run `make setup`")
    print("| start | runs | wall s without | wall s with | CPU s without | CPU s with | ratio |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for kind in KINDS:
        runs: dict[bool, list[dict[str, float]]] = {False: [], True: []}
        for _ in range(args.runs):
            for with_archive in (False, True):
                runs[with_archive].append(measure(kind, with_archive))

        wall = [statistics.median(r["wall_s"] for r in runs[mode]) for mode in (False, True)]
        cpu = [statistics.median(r["cpu_s"] for r in runs[mode]) for mode in (False, True)]
        print(
            f"| {kind} | {args.runs} | {wall[0]:.1f} | {wall[1]:.1f} | {cpu[0]:.1f} | {cpu[1]:.1f}"
            f" | {cpu[1] / cpu[0]:.2f} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
