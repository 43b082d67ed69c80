"""The part of ``streamscale attach`` that runs inside the job's own Python process.

Loaded by the bootstrap ``sitecustomize`` (:data:`~streamscale.autoscale.launch.
BOOTSTRAP_DIR`) when :data:`~streamscale.autoscale.launch.ENV` is set, before the job's first
line. It imports nothing of Spark at start: a finder on ``sys.meta_path`` waits for the job to
import ``pyspark.sql.session``, then wraps ``SparkSession.Builder.getOrCreate`` so that

- the job's own settings are checked before its session starts: one contradicting a setting
  the autoscaler needs ends the job with one line (:func:`~streamscale.autoscale.launch.
  contradiction`), and its own ``spark.jars`` is joined with the connector's;
- the first session it returns gets :func:`streamscale.attach` (every streaming query of the
  session, present and future; the lag on ``/metrics``; the group commits);
- the autoscaler stops before the session does (``SparkContext.stop`` wrapped) and when the
  process exits (``atexit``, which runs before pyspark's own, registered earlier).
"""

from __future__ import annotations

import atexit
import contextlib
import importlib.abc
import importlib.machinery
import logging
import os
import signal
import sys
import threading
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any

from streamscale.autoscale.launch import (
    CONF_ENV,
    ENV,
    PREFIX,
    AttachOptions,
    brings_connector,
    contradiction,
    merge_jars,
)

log = logging.getLogger(__name__)


class _State:
    """The one autoscaler of this process, and the options it was started with."""

    def __init__(self, options: AttachOptions, needed: dict[str, str]) -> None:
        self.options = options
        self.needed = needed
        self.scaler: Any = None
        self.context: Any = None
        self.lock = threading.Lock()

    def stop(self) -> None:
        with self.lock:
            scaler, self.scaler = self.scaler, None
        if scaler is not None:
            try:
                scaler.stop()
            except Exception as exc:  # the session may be gone already; nothing to keep
                log.debug("stopping the autoscaler: %s", exc)


def refuse(message: str) -> None:
    """End the job with one line, before its session starts."""
    raise SystemExit(f"{PREFIX}: {message}")


def check_builder(state: _State, options: dict[str, Any]) -> None:
    """Refuse the job's own contradicting settings; join its ``spark.jars`` with ours."""
    given = {str(k): str(v) for k, v in options.items()}
    problem = contradiction(state.needed, given, "its code (SparkSession.builder)")
    if problem:
        refuse(problem)
    ours = state.needed.get("spark.jars")
    if ours and "spark.jars" in given and not brings_connector(given):
        options["spark.jars"] = merge_jars(ours, given["spark.jars"])


def on_session(state: _State, spark: Any) -> None:
    """Attach the autoscaler to ``spark`` once (a later ``getOrCreate`` returns the same)."""
    import streamscale

    with state.lock:
        if state.scaler is not None or state.context is spark.sparkContext:
            return
        state.context = spark.sparkContext
    opts = state.options
    try:
        scaler = streamscale.attach(
            spark,
            min_executors=opts.min_executors,
            max_executors=opts.max_executors,
            policy=opts.policy,
            metrics_port=opts.metrics_port,
            interval_s=opts.interval_s,
            stabilization_window_s=opts.stabilization_window_s,
            decision_log=opts.decision_log,
        )
    except streamscale.Error as exc:
        with contextlib.suppress(Exception):
            spark.stop()
        refuse(str(exc))
        return
    with state.lock:
        state.scaler = scaler
    # After the session's start: atexit runs the last registered first, so the autoscaler
    # stops before pyspark's own exit handler (registered when the JVM started) kills the JVM.
    atexit.register(state.stop)
    where = f", metrics at {scaler.metrics_url}" if scaler.metrics_url else ""
    print(
        f"{PREFIX}: autoscaler on ({opts.policy} policy, "
        f"{opts.min_executors}-{opts.max_executors} executors{where})",
        file=sys.stderr,
        flush=True,
    )


def patch(state: _State, module: ModuleType) -> None:
    """Wrap ``SparkSession.Builder.getOrCreate`` and ``SparkContext.stop`` of the loaded
    ``pyspark.sql.session``."""
    builder = module.SparkSession.Builder
    original: Callable[[Any], Any] = builder.getOrCreate
    if getattr(original, "_streamscale", False):
        return

    def get_or_create(self: Any) -> Any:
        with self._lock:
            check_builder(state, self._options)
        spark = original(self)
        on_session(state, spark)
        return spark

    get_or_create._streamscale = True  # type: ignore[attr-defined]
    builder.getOrCreate = get_or_create
    from pyspark import SparkContext

    stop_context: Callable[[Any], None] = SparkContext.stop

    def stop(self: Any) -> None:
        if self is state.context:
            state.stop()
        stop_context(self)

    SparkContext.stop = stop  # type: ignore[method-assign]


class _PatchOnImport(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Runs ``then(module)`` right after ``name`` is first imported, whoever imports it."""

    def __init__(self, name: str, then: Callable[[ModuleType], None]) -> None:
        self.name = name
        self.then = then
        self._spec: importlib.machinery.ModuleSpec | None = None
        self._inner: Any = None

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname != self.name or self._spec is not None:
            return None
        sys.meta_path.remove(self)
        try:
            from importlib.util import find_spec

            spec = find_spec(fullname)
        finally:
            sys.meta_path.insert(0, self)
        if spec is None or spec.loader is None:
            return None
        self._spec = spec
        self._inner = spec.loader
        spec.loader = self
        return spec

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        created: ModuleType | None = self._inner.create_module(spec)
        return created

    def exec_module(self, module: ModuleType) -> None:
        self._inner.exec_module(module)
        with contextlib.suppress(ValueError):
            sys.meta_path.remove(self)
        self.then(module)


def _exit_on_sigterm() -> None:
    """SIGTERM ends the job as Ctrl-C does (``atexit`` runs: the autoscaler stops), unless
    the job handles SIGTERM itself."""
    if threading.current_thread() is not threading.main_thread():
        return
    if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:

        def handler(signum: int, frame: Any) -> None:
            raise SystemExit(128 + signum)

        signal.signal(signal.SIGTERM, handler)


def install(environ: dict[str, str] | None = None) -> bool:
    """Install the hook when the launcher asked for it (:data:`ENV`); False otherwise. The
    variables are removed, so that no process the job starts attaches again."""
    import json

    env = os.environ if environ is None else environ
    raw = env.pop(ENV, None)
    needed_raw = env.pop(CONF_ENV, "{}")
    if not raw:
        return False
    state = _State(AttachOptions.from_json(raw), json.loads(needed_raw))
    loaded = sys.modules.get("pyspark.sql.session")
    if loaded is not None:
        patch(state, loaded)
    else:
        sys.meta_path.insert(0, _PatchOnImport("pyspark.sql.session", lambda m: patch(state, m)))
    _exit_on_sigterm()
    return True
