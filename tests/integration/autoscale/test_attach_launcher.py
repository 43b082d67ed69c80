"""``streamscale attach -- python job.py``: an unmodified PySpark job (``jobs/``, written as
Spark's own examples are, no import of streamscale) autoscaled on the local standalone
cluster the launcher starts for it: a backlog → scale-out → drained → scale-in → the job's
output exactly what its input says; Ctrl-C ends the job, and no process is left behind.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from wordcount import JOB, PARTITIONS, counts, expected, fill

from streamscale import processes
from streamscale.settings import Settings

pytestmark = pytest.mark.integration

JOBS = Path(__file__).parent / "jobs"
LINES = 40_000
WORK_S = 0.0005
"""Per-line work of the job: 2,000 lines/s an executor at most, so the backlog takes one
executor 20 s or more, and the autoscaler adds the second."""
TIMEOUT_S = 420.0  # about 2 minutes on an idle 2-core machine


def applied(log: Path) -> list[dict[str, Any]]:
    if not log.exists():
        return []
    rows = [json.loads(x) for x in log.read_text().splitlines() if x.strip()]
    return [d for d in rows if d["outcome"] == "applied" and d["direction"] in ("up", "down")]


def wait_for(what: str, check: Callable[[], bool], deadline: float, launcher: Any) -> None:
    while not check():
        if launcher.poll() is not None:
            raise AssertionError(f"the launcher exited ({launcher.returncode}) before {what}")
        if time.monotonic() > deadline:
            raise AssertionError(f"not within the time allowed: {what}")
        time.sleep(1)


def test_attach_runs_an_unmodified_job_and_scales_it_out_and_in(
    tmp_path: Path, topic_factory: Callable[..., str], settings: Settings
) -> None:
    source = topic_factory(partitions=PARTITIONS, prefix="attach-lines")
    output = topic_factory(partitions=PARTITIONS, prefix="attach-counts")
    fill(settings.bootstrap_servers, source, 0, LINES)
    log = tmp_path / "decisions.jsonl"
    argv = [
        sys.executable,
        "-m",
        "streamscale.cli.main",
        "attach",
        "--max-executors",
        "2",
        "--autoscale-interval",
        "2",
        "--window",
        "8",
        "--decision-log",
        str(log),
        "--metrics-port",
        "0",
        "--data-dir",
        str(tmp_path / "run"),
        "--",
        sys.executable,
        str(JOB),
        settings.bootstrap_servers,
        source,
        output,
        str(tmp_path / "checkpoint"),
        str(WORK_S),
    ]
    began = time.monotonic()
    deadline = began + TIMEOUT_S
    err = tmp_path / "stderr.txt"
    with open(tmp_path / "stdout.txt", "w") as out, open(err, "w") as errors:
        launcher = subprocess.Popen(
            argv,
            stdout=out,
            stderr=errors,
            start_new_session=True,
            # the user's own submit settings, kept beside the launcher's: 4 state partitions
            # (Spark's default 200 would make every batch 200 tasks on one core)
            env={
                **os.environ,
                "PYSPARK_SUBMIT_ARGS": "--conf spark.sql.shuffle.partitions=4 pyspark-shell",
            },
        )
    seen: set[int] = set()
    try:
        wait_for("the scale-out", lambda: len(applied(log)) >= 1, deadline, launcher)
        seen.update(processes.descendants(launcher.pid))
        url = re.search(r"metrics at (\S+)\)", err.read_text())
        assert url, err.read_text()[-2000:]
        with urllib.request.urlopen(url.group(1), timeout=10) as page:
            metrics = page.read().decode()
        assert f'topic="{source}"' in metrics, metrics[:2000]
        wait_for("the scale-in", lambda: len(applied(log)) >= 2, deadline, launcher)
        want = expected(LINES)
        bootstrap = settings.bootstrap_servers
        wait_for("the exact counts", lambda: counts(bootstrap, output) == want, deadline, launcher)
        seen.update(processes.descendants(launcher.pid))
        print(f"scaled out and in, counts exact after {time.monotonic() - began:.0f} s")
    finally:
        if launcher.poll() is None:
            os.kill(launcher.pid, signal.SIGINT)  # Ctrl-C: the launcher passes it on
            try:
                launcher.wait(timeout=90)
            except subprocess.TimeoutExpired:
                processes.stop_group(launcher.pid, 5)
    acts = applied(log)
    assert [d["direction"] for d in acts][:2] == ["up", "down"], acts
    assert acts[0]["total_lag"] > 0 and acts[1]["total_lag"] == 0, acts
    assert launcher.returncode in (0, 130), err.read_text()[-3000:]
    left = [pid for pid in seen if processes.pid_alive(pid)]
    assert not left, f"left behind: {processes.commands(left)}"
    assert not list((tmp_path / "run").glob("**/*.json")), "recorded processes remain"


def test_a_job_that_sets_its_own_master_is_refused_in_one_line(tmp_path: Path) -> None:
    """The check runs before the job's session starts: no cluster is reached."""
    argv = [
        sys.executable,
        "-m",
        "streamscale.cli.main",
        "attach",
        "--master",
        "spark://127.0.0.1:7077",
        "--data-dir",
        str(tmp_path),
        "--",
        sys.executable,
        str(JOBS / "local_master.py"),
    ]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert done.returncode == 1, done.stderr
    lines = done.stderr.strip().splitlines()
    assert lines == [
        "streamscale attach: the job sets spark.master=local[2] in its code "
        "(SparkSession.builder), but streamscale attach runs it on spark://127.0.0.1:7077: "
        "remove it there, or pass --master local[2] to streamscale attach (a cluster manager "
        "that takes executor requests: spark://, k8s://)"
    ], done.stderr


def test_spark_submit_jobs_are_attached_through_the_same_hook(tmp_path: Path) -> None:
    """``-- spark-submit job.py``: the settings go into spark-submit's options, and the job's
    Python driver (started by spark-submit's JVM) loads the same hook, which refuses the job's
    own master in one line before its session starts."""
    spark_submit = Path(sys.executable).parent / "spark-submit"
    argv = [
        sys.executable,
        "-m",
        "streamscale.cli.main",
        "attach",
        "--master",
        "spark://127.0.0.1:7077",
        "--data-dir",
        str(tmp_path),
        "--",
        str(spark_submit),
        "--name",
        "local-job",
        str(JOBS / "local_master.py"),
    ]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    assert done.returncode == 1, done.stderr[-3000:]
    # spark-submit's JVM passes its Python driver's stderr on to its own stdout
    assert (
        "streamscale attach: the job sets spark.master=local[2] in its code "
        "(SparkSession.builder), but streamscale attach runs it on spark://127.0.0.1:7077"
    ) in done.stdout, done.stdout[-3000:]
    assert "using 192" not in done.stderr, "the JVM took an address other than loopback"
