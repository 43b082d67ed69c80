"""What the Kubernetes tests share: waiting on the API server's answers."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any


def wait(check: Callable[[], Any], what: str, timeout_s: float = 120.0) -> Any:
    """``check()``'s first truthy answer, asked every 0.2 s; an AssertionError naming
    ``what`` after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s:.0f} s waiting for {what}")
        time.sleep(0.2)
