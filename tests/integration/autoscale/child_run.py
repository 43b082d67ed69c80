"""Run an autoscale integration test's own file as a child process (its Spark application
apart from pytest's), stop the local cluster it started whatever happens, and read the JSON
line it ends with."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from streamscale import cluster


def run_child(script: str, args: list[str], cluster_dir: Path, timeout_s: float) -> Any:
    """The child's last stdout line as JSON (printed indented for ``pytest -s``)."""
    try:
        child = subprocess.run(
            [sys.executable, script, *args], capture_output=True, text=True, timeout=timeout_s
        )
    finally:
        cluster.stop(cluster_dir)  # only does something if the child died half-way
    assert child.returncode == 0, child.stderr[-4000:]
    result = json.loads(child.stdout.strip().splitlines()[-1])
    print(json.dumps(result, indent=1))
    return result
