"""Put first on a job's ``PYTHONPATH`` by ``streamscale attach``: Python imports it at start.

It installs :mod:`streamscale.autoscale.hook` (only when the launcher asked for it), then
runs the ``sitecustomize`` this one hides, if there is one further on the path, as
``opentelemetry-instrument``'s bootstrap does.
"""

from __future__ import annotations

import importlib.util
import os
import sys


def _install() -> None:
    if not os.environ.get("_STREAMSCALE_ATTACH"):
        return
    try:
        from streamscale.autoscale.hook import install
    except ImportError as exc:
        raise SystemExit(
            f"streamscale attach: this Python ({sys.executable}) cannot import streamscale "
            f"({exc}): run the job with the Python streamscale is installed in"
        ) from None
    install()


def _chain() -> None:
    """Run the next ``sitecustomize`` on the path (this directory left out)."""
    here = os.path.dirname(os.path.abspath(__file__))
    path = [p for p in sys.path if os.path.abspath(p or ".") != here]
    for finder in sys.meta_path:
        find = getattr(finder, "find_spec", None)
        if find is None:
            continue
        spec = find("sitecustomize", path)
        if spec is not None and spec.origin and os.path.dirname(spec.origin) != here:
            module = importlib.util.module_from_spec(spec)
            if spec.loader is not None:
                spec.loader.exec_module(module)
            return


_install()
_chain()
