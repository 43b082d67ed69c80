"""Helpers of the secured-cluster tests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path


def files_under(*roots: Path) -> Iterator[Path]:
    """Every file under ``roots`` (a root may be a file)."""
    for root in roots:
        if root.is_file():
            yield root
        elif root.is_dir():
            yield from (p for p in root.rglob("*") if p.is_file())
