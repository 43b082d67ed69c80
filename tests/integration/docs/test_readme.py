"""The README is a front page: short, with no issue numbers in its headings or figures, and
every command of its quickstart runs as written (in a folder of its own, where the quickstart
starts and stops its own broker)."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from streamscale import processes

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[3]
README = (ROOT / "README.md").read_text()
TIMEOUT_S = 600.0  # about 2 minutes on an idle 2-core machine


def quickstart() -> str:
    """The first indented block of the README's quickstart section."""
    section = README.split("## Quickstart", 1)[1].split("\n## ", 1)[0]
    block = re.search(r"\n\n((?: {4}.*\n)+)", section)
    assert block, "the quickstart has no command block"
    return "\n".join(line[4:] for line in block.group(1).splitlines())


def test_the_readme_is_a_front_page() -> None:
    assert len(README.splitlines()) <= 200
    for line in README.splitlines():
        if line.startswith("#") or line.startswith("|"):
            assert not re.search(r"\bissues? \d+", line), line
    for link in re.findall(r"\]\((docs/[^)#]+)", README):
        page = ROOT / link
        generated = link.startswith("docs/reference/")
        assert generated or page.exists(), f"the README links to {link}, which is missing"


def test_every_quickstart_command_runs_as_written(tmp_path: Path) -> None:
    script = quickstart()
    assert "streamscale broker start" in script and "streamscale run" in script
    (tmp_path / ".venv").symlink_to(ROOT / ".venv")
    out, err = tmp_path / "stdout.txt", tmp_path / "stderr.txt"
    with open(out, "w") as stdout, open(err, "w") as stderr:
        proc = subprocess.Popen(
            ["bash", "-euo", "pipefail", "-c", script],
            cwd=tmp_path,
            stdout=stdout,
            stderr=stderr,
            start_new_session=True,
            # /metrics on a free port: 9464 may be another test's, or another user's
            env={**os.environ, "STREAMSCALE_METRICS_PORT": "0"},
        )
    try:
        code = proc.wait(timeout=TIMEOUT_S)
    finally:
        processes.stop_group(proc.pid, 10)
        # a broker the script started and could not stop, stopped by its recorded PID
        subprocess.run(
            [str(ROOT / ".venv/bin/streamscale"), "broker", "stop"],
            cwd=tmp_path,
            capture_output=True,
            timeout=120,
        )
    assert code == 0, f"{out.read_text()[-2000:]}\n{err.read_text()[-3000:]}"
    text = out.read_text()
    assert "game-sessions: stopped; totals:" in text and "nothing processed" not in text, text
    assert "broker stopped" in text
