"""Running the ``streamscale`` CLI in a child process, as a user would."""

from __future__ import annotations

import os
import subprocess
import sys


def cli(
    *args: str, env: dict[str, str] | None = None, timeout_s: float = 120
) -> subprocess.CompletedProcess[str]:
    """``streamscale ARGS`` with ``env`` added to the environment; output captured."""
    return subprocess.run(
        [sys.executable, "-m", "streamscale.cli.main", *args],
        capture_output=True,
        text=True,
        timeout=timeout_s,
        env={**os.environ, **(env or {})},
    )
