"""Spark's dynamic allocation against streamscale's autoscaler, on a real run (issue 38).

    PYTHONPATH=src STREAMSCALE_JARS_DIR=jvm/lib .venv/bin/python benchmarks/dynamic_allocation.py \\
        [--runs 1] [--duration 180] [--window 240] [--burst 450000] [--rate 800] \\
        [--short-idle 10s | --no-short] [--only COLUMN] [--out build/dynamic-allocation]

One invocation runs the demo's experiment (:mod:`streamscale.experiment.demo`: the embedded
Apache Kafka, a local standalone cluster of one worker with 2 cores, the game-sessions
pipeline with its state in Spark's RocksDB state store, read with Spark's connector) once per
scaler and run, one after the other on the same machine, with the same load profile (the
demo's: steady ``--rate`` frames/s for 15 % of ``--duration``, a burst of ``--burst`` frames
that one executor cannot drain within the 30 s time-lag objective, steady again for 30 %,
then nothing: the settle), each for the same ``--window`` seconds from the pipeline's start,
between 1 and 2 executors of 1 core:

- ``streamscale``: the autoscaler, ``rate`` policy at its defaults (a decision every 10 s,
  a 60 s stabilization window before a scale-in: :class:`~streamscale.autoscale.runtime.
  AutoscaleOptions`);
- ``spark-dynamic``: Spark's dynamic allocation as a user enables it on standalone without an
  external shuffle service (on, shuffle tracking on, Spark's default timeouts, the same
  executor bounds; :func:`~streamscale.experiment.demo.dynamic_allocation_conf`), and no
  autoscaler;
- ``spark-dynamic-<T>`` (unless ``--no-short``): the same with ``executorIdleTimeout`` and
  ``shuffleTracking.timeout`` of ``--short-idle``, what Spark's docs offer a user whose
  executors are never given back.

Every run is measured by one rule (:mod:`streamscale.experiment.comparison`) over its window:
the time lag of the project's lag model, sampled every second (highest per 10 s; seconds
above the objective; seconds without lag data), executor-seconds and rescales from Spark's
status store (each executor's add and remove times), the state partitions that moved to
another executor (the state placement sampled every second) and those the removed executors
held, the drain time after the lag's peak (:func:`~streamscale.experiment.report.summarize`),
and whether the output verifies (every approved frame in exactly its session, read back after
the run). It prints one JSON line per run, then the medians side by side (a markdown table)
and the time lag over time, and writes every run's report (``report.html``, plots,
``summary.json``, the live view's lines in ``live.log``) and ``results.json`` under ``--out``.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
import time
from pathlib import Path
from typing import Any

from rich.console import Console

from streamscale.autoscale.runtime import AutoscaleOptions
from streamscale.experiment import comparison
from streamscale.experiment.demo import SPARK_DYNAMIC, STREAMSCALE, DemoOptions, run_demo

IDLE_KEYS = (
    "spark.dynamicAllocation.executorIdleTimeout",
    "spark.dynamicAllocation.shuffleTracking.timeout",
)
"""What ``--short-idle`` shortens: the idle timeout of an executor, and of one holding
shuffle files (infinite by default: with shuffle tracking, an executor that wrote a
micro-batch's shuffle files waits for them to be cleaned, not for the idle timeout)."""


def variants(short_idle: str | None) -> dict[str, tuple[str, tuple[tuple[str, str], ...]]]:
    """Scaler and dynamic-allocation settings of each column."""
    out: dict[str, tuple[str, tuple[tuple[str, str], ...]]] = {
        STREAMSCALE: (STREAMSCALE, ()),
        SPARK_DYNAMIC: (SPARK_DYNAMIC, ()),
    }
    if short_idle:
        out[f"{SPARK_DYNAMIC}-{short_idle}"] = (
            SPARK_DYNAMIC,
            tuple((key, short_idle) for key in IDLE_KEYS),
        )
    return out


def run_one(
    args: argparse.Namespace, name: str, scaler: str, settings: tuple[tuple[str, str], ...], n: int
) -> dict[str, Any]:
    """One run of one scaler: its window's figures, with the demo summary's verdicts."""
    defaults = AutoscaleOptions()
    report_dir = args.out / f"{name}-{n}"
    report_dir.mkdir(parents=True, exist_ok=True)
    options = DemoOptions(
        duration_s=args.duration,
        rate=args.rate,
        burst=args.burst,
        report_dir=report_dir,
        metrics_port=0,
        min_executors=1,
        max_executors=2,
        control_interval_s=defaults.interval_s,
        stabilization_window_s=defaults.stabilization_window_s,
        seed=args.seed,
        scaler=scaler,
        dynamic_allocation=settings,
        run_for_s=args.window,
    )
    load_before = os.getloadavg()
    began = time.time()
    with (report_dir / "live.log").open("w") as log:
        summary = run_demo(options, console=Console(file=log, width=200))
    window = summary.get("window") or {}
    return {
        "scaler": name,
        "run": n,
        **window,
        "drain_time_s": summary.get("drain_time_s"),
        "verified": summary.get("verified"),
        "verification": summary.get("verification"),
        "records_in": summary.get("records_in"),
        "first_processed_s": summary.get("first_processed_s"),
        "run_seconds": round(time.time() - began, 1),
        "load_before": [round(x, 2) for x in load_before],
        "load_after": [round(x, 2) for x in os.getloadavg()],
        "started": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(began)),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=1, help="runs of each scaler (medians)")
    parser.add_argument("--duration", type=float, default=180.0, help="the load profile's span")
    parser.add_argument(
        "--window", type=float, default=240.0, help="seconds measured from the pipeline's start"
    )
    parser.add_argument("--rate", type=float, default=DemoOptions.rate, help="steady frames/s")
    parser.add_argument("--burst", type=int, default=DemoOptions.burst, help="burst frames")
    parser.add_argument("--seed", type=int, default=DemoOptions.seed)
    parser.add_argument(
        "--short-idle",
        default="10s",
        help="idle and shuffle-tracking timeouts of the third column (Spark's time syntax)",
    )
    parser.add_argument("--no-short", action="store_true", help="no third column")
    parser.add_argument(
        "--only", action="append", default=[], help="run only this column (repeatable)"
    )
    parser.add_argument("--out", type=Path, default=Path("build/dynamic-allocation"))
    args = parser.parse_args()
    columns = variants(None if args.no_short else args.short_idle)
    if args.only:
        unknown = set(args.only) - set(columns)
        if unknown:
            parser.error(f"unknown column {sorted(unknown)}: {', '.join(columns)}")
        columns = {name: columns[name] for name in args.only}
    command = " ".join(shlex.quote(a) for a in ["benchmarks/dynamic_allocation.py", *sys.argv[1:]])
    began = time.time()
    print(f"# {command}", flush=True)
    print(
        f"# {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime(began))}, "
        f"load average {os.getloadavg()[0]:.2f}, {os.cpu_count()} cores",
        flush=True,
    )
    results: list[dict[str, Any]] = []
    for n in range(1, args.runs + 1):
        for name, (scaler, settings) in columns.items():
            row = run_one(args, name, scaler, settings, n)
            results.append(row)
            print(json.dumps(row), flush=True)
    by_column = {
        name: comparison.medians([r for r in results if r["scaler"] == name]) for name in columns
    }
    print()
    print(comparison.table(by_column, args.runs))
    print()
    print(comparison.lag_over_time(by_column))
    print(
        f"\n# {len(results)} runs in {time.time() - began:.0f} s, "
        f"load average now {os.getloadavg()[0]:.2f}",
        flush=True,
    )
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "results.json").write_text(
        json.dumps({"command": command, "runs": results, "medians": by_column}, indent=2) + "\n"
    )


if __name__ == "__main__":
    main()
