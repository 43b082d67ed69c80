"""Attach the autoscaler to any running SparkSession: ``streamscale.attach(spark, ...)``.

For a data engineer's own PySpark job on ``format("kafka")`` (or the project's
``streamscale-kafka`` source), not only the project's pipelines::

    import streamscale

    scaler = streamscale.attach(spark, min_executors=1, max_executors=8, metrics_port=9464)
    query = spark.readStream.format("kafka")....writeStream....start()
    ...
    scaler.stop()

It listens to the session's streaming queries (those started before or after), exports their
lag on ``/metrics``, commits their processed offsets to their consumer groups, and every
``interval_s`` sizes the executors for the sum of their needs. The session must run on a
cluster manager that takes executor requests (standalone ``spark://``, Kubernetes) with
dynamic allocation off; ``spark.cores.max`` (standalone) bounds what it can be granted.
Before anything starts, attach checks that the executor count can move between its bounds
(:mod:`streamscale.autoscale.headroom`): the settings, and the standalone Master's workers
where it answers.
"""

from __future__ import annotations

import dataclasses
import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from streamscale.autoscale.controller import Controller, DecisionRecord
from streamscale.autoscale.headroom import MasterReport, headroom, read_master
from streamscale.autoscale.policy import PolicyKind
from streamscale.autoscale.runtime import AutoscaleOptions, start_autoscaler
from streamscale.errors import ConfigError
from streamscale.settings import LOCALITY_WAIT, Settings

log = logging.getLogger(__name__)

if TYPE_CHECKING:
    from streamscale.kafka.commits import GroupCommitter
    from streamscale.lag import LagMonitor

__all__ = ["Autoscaler", "attach"]


@dataclass
class Autoscaler:
    """An autoscaler attached to a session: :meth:`stop` detaches it (executors stay as they
    are; the group commits stay registered while the session lives)."""

    controller: Controller
    monitor: LagMonitor
    committer: GroupCommitter | None

    @property
    def metrics_url(self) -> str | None:
        """``http://127.0.0.1:<port>/metrics``, or None without a server."""
        return self.monitor.server.url if self.monitor.server is not None else None

    @property
    def decisions(self) -> list[DecisionRecord]:
        """Every decision taken so far (holds included), oldest first."""
        return list(self.controller.records)

    def stop(self) -> None:
        """Stop deciding, stop the ``/metrics`` server and the lag listener."""
        try:
            self.controller.stop()
        finally:
            self.monitor.stop()

    def __enter__(self) -> Autoscaler:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def waits_for_locality(value: str) -> bool:
    """Whether a ``spark.locality.wait`` value (``3s``, ``500ms``, ``0``...) is above zero."""
    return re.fullmatch(r"\s*0*(\.0*)?\s*[a-z]*\s*", value.lower()) is None


def attach(
    spark: Any,
    *,
    min_executors: int = 1,
    max_executors: int = 8,
    policy: str | PolicyKind = PolicyKind.RATE,
    metrics_port: int | None = 9464,
    metrics_host: str | None = None,
    interval_s: float = 10.0,
    stabilization_window_s: float = 60.0,
    surge_share: float = 0.0,
    reverse_for_slo: bool = False,
    queries: Sequence[str] | None = None,
    decision_log: str | Path | None = None,
    commit_offsets: bool = True,
    settings: Settings | None = None,
    master_report: MasterReport = read_master,
) -> Autoscaler:
    """Autoscale the streaming queries of ``spark``; returns a handle with ``stop()``.

    ``queries``: names of the queries to serve (None: every Kafka query of the session,
    present and future; several queries' needs are summed). ``metrics_port``: port of
    ``/metrics`` (0: a free one, None: no server); ``metrics_host``: its bind address (None:
    ``settings.metrics_host``, ``STREAMSCALE_METRICS_HOST``, 127.0.0.1 unless set; in a pod,
    ``0.0.0.0`` for Prometheus to scrape it). ``settings``: the connection used to commit
    offsets of sources whose own options cannot be read (default: ``Settings()``, from
    ``STREAMSCALE_*``). Each query's ``minPartitions``, ``maxOffsetsPerTrigger`` and trigger
    interval are read from the running query, for the parallelism cap and the capacity model;
    ``surge_share``: headroom the ``rate`` policy keeps at a scale-in for a surge of that share
    of the input (:attr:`~streamscale.autoscale.policy.PolicyConfig.surge_share`; 0: none);
    ``reverse_for_slo``: a scale-up may reverse a recent scale-in once the time-lag objective
    is broken, or a rising input is predicted to break it
    (:attr:`~streamscale.autoscale.policy.PolicyConfig.reverse_for_slo`; off: never inside the
    stabilization window);
    ``settings``' trigger interval and batch limit stand in while they cannot be read.
    ``master_report``: how the standalone Master's view of its workers is read (default: its
    web UI's ``/json/`` on the master's host, see :func:`~streamscale.autoscale.headroom.
    read_master`; when it does not answer, only the settings are checked).

    Refused at once (:class:`~streamscale.errors.ConfigError`, a ValueError) for bounds or a
    policy that cannot work, for a session whose executor count cannot move above
    ``min_executors`` (on standalone: ``spark.executor.cores`` unset, ``spark.cores.max`` or
    the workers too small), and (:class:`~streamscale.errors.ScalingError`, a RuntimeError)
    when the cluster manager takes no executor requests (``local[*]``). When the count can
    move but not up to ``max_executors``, a one-line warning says why and the reachable count
    becomes the upper bound.
    """
    try:
        kind = PolicyKind(str(policy))
    except ValueError:
        choices = ", ".join(k.value for k in PolicyKind)
        raise ConfigError(f"policy {policy!r} is not one of: {choices}") from None
    options = AutoscaleOptions(
        policy=kind,
        min_executors=min_executors,
        max_executors=max_executors,
        interval_s=interval_s,
        stabilization_window_s=stabilization_window_s,
        surge_share=surge_share,
        reverse_for_slo=reverse_for_slo,
        decision_log=None if decision_log is None else Path(decision_log),
    )
    settings = settings or Settings()
    sc = spark.sparkContext
    conf = {str(k): str(v) for k, v in sc.getConf().getAll()}
    master = str(sc.master)
    report = master_report(master, conf) if master.startswith("spark://") else None
    room = headroom(
        master, conf, min_executors, max_executors, report, app_id=str(sc.applicationId)
    )
    if room.fatal:
        raise ConfigError(room.message)
    if room.message is not None:
        log.warning("%s", room.message)
    options = dataclasses.replace(options, max_executors=room.bound(max_executors))
    wait = conf.get(LOCALITY_WAIT, "3s")
    if waits_for_locality(wait):
        # Read once, when the SparkContext starts: attach cannot change it.
        log.warning(
            "%s is %s: as executors come and go, Kafka tasks wait that long in every "
            "micro-batch for an executor that is busy or gone; build the session with "
            "%s=0s (streamscale.spark.session does)",
            LOCALITY_WAIT,
            wait,
            LOCALITY_WAIT,
        )
    from streamscale.kafka.commits import commit_offsets as register_commits
    from streamscale.kafka.commits import group_committer
    from streamscale.lag import start_monitor

    committer = (
        register_commits(spark, settings.kafka_config())
        if commit_offsets and group_committer(spark) is None
        else group_committer(spark)
    )
    host = settings.metrics_host if metrics_host is None else metrics_host
    monitor = start_monitor(spark, host=host, port=metrics_port)
    try:
        controller = start_autoscaler(
            spark,
            None if queries is None else tuple(queries),
            monitor.tracker,
            options,
            settings=settings,
            grantable=room.available,
        )
    except BaseException:
        monitor.stop()
        raise
    return Autoscaler(controller, monitor, committer)
