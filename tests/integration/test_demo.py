"""The experiment end to end: ``streamscale demo`` on the embedded broker and a local
standalone cluster (1 → 2 → 1 executors), in a child process (one SparkContext per process).

This one run is also the autoscaler's integration test (issue 5): a burst makes the
controller scale out within 2 control intervals of the backlog showing, the new executor runs
tasks, the controller scales back in after catch-up plus the stabilization window, and the
output matches the input exactly (every approved frame in exactly its session).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from streamscale.processes import free_port

pytestmark = pytest.mark.integration

INTERVAL_S = 5.0


@pytest.fixture(scope="module")
def demo_run(
    tmp_path_factory: pytest.TempPathFactory,
) -> tuple[subprocess.CompletedProcess[str], Path]:
    report = tmp_path_factory.mktemp("report")
    data = tmp_path_factory.mktemp("demo-data")
    argv = [
        sys.executable,
        "-m",
        "streamscale.cli.main",
        "demo",
        "--duration",
        "120",
        "--report-dir",
        str(report),
        "--data-dir",
        str(data),
        "--metrics-port",
        str(free_port()),
        "--control-interval",
        str(INTERVAL_S),
        "--window",
        "15",
    ]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=600, env=dict(os.environ))
    return done, report


def decisions(report: Path) -> list[dict[str, Any]]:
    lines = (report / "decisions.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines]


def test_demo_writes_a_verified_report(
    demo_run: tuple[subprocess.CompletedProcess[str], Path],
) -> None:
    done, report = demo_run
    assert done.returncode == 0, done.stderr[-3000:]
    for name in (
        "report.html",
        "summary.json",
        "lag_total.png",
        "lag_partitions.png",
        "executors.png",
        "rates.png",
    ):
        assert (report / name).stat().st_size > 0, name
    assert (report / "lag_total.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    summary = json.loads((report / "summary.json").read_text())
    assert summary["verified"] is True, summary.get("verification")
    assert summary["records_in"] > 0 and summary["records_out"] > 0
    assert summary["scale_outs"] >= 1
    assert summary["final_lag"] == 0
    assert summary["max_lag"] > 0
    assert "t=" in done.stdout  # one plain line per interval without a terminal


def test_autoscaler_scales_out_fast_then_back_in(
    demo_run: tuple[subprocess.CompletedProcess[str], Path],
) -> None:
    done, report = demo_run
    assert done.returncode == 0, done.stderr[-3000:]
    log = decisions(report)
    ups = [i for i, d in enumerate(log) if d["direction"] == "up" and d["outcome"] == "applied"]
    assert ups, "no scale-out"
    # The backlog first shows in a fresh decision input; the scale-out follows within 2 intervals.
    backlog = next(
        i
        for i, d in enumerate(log)
        if d["total_lag"] and d["total_lag"] > 10_000 and d["metrics_age_s"] is not None
    )
    assert ups[0] <= backlog + 2, log[max(0, backlog - 1) : ups[0] + 1]
    downs = [i for i, d in enumerate(log) if d["direction"] == "down" and d["outcome"] == "applied"]
    assert downs and downs[-1] > ups[0], "no scale-in after the scale-out"
    # Scale-in only once caught up: no backlog in the decision that gave the executor back.
    assert log[downs[-1]]["total_lag"] is not None and log[downs[-1]]["total_lag"] < 10_000

    summary = json.loads((report / "summary.json").read_text())
    tasks = summary["executor_tasks"]
    assert len(tasks) >= 2, tasks  # a second executor joined...
    added = sorted(tasks, key=int)[-1]
    assert tasks[added] > 0, tasks  # ...and ran tasks
