"""Wiring the autoscaler onto a live SparkSession: the options ``streamscale run --autoscale``
and the demo share, the one function that starts a controller for some or all of the
session's queries, and what it reads of them from the JVM (their ``minPartitions``)."""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from streamscale.autoscale.controller import (
    Controller,
    DecisionRecord,
    QueryLimits,
    SnapshotSource,
)
from streamscale.autoscale.policy import PolicyConfig, PolicyKind
from streamscale.errors import ConfigError, ScalingError
from streamscale.settings import Settings

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class AutoscaleOptions:
    """What a user sets on the command line; the rest of :class:`PolicyConfig` is defaults."""

    policy: PolicyKind = PolicyKind.RATE
    min_executors: int = 1
    max_executors: int = 2
    interval_s: float = 10.0
    stabilization_window_s: float = 60.0
    lag_threshold: float = 10_000.0
    surge_share: float = 0.0
    """``rate``: headroom a scale-down keeps for a surge (:attr:`PolicyConfig.surge_share`)."""
    reverse_for_slo: bool = False
    """``rate``: the objective before the no-reversal rule
    (:attr:`PolicyConfig.reverse_for_slo`)."""
    decision_log: Path | None = None

    def __post_init__(self) -> None:
        if self.min_executors < 1:
            raise ConfigError("--min-executors must be at least 1 (a query needs an executor)")
        if self.max_executors < self.min_executors:
            raise ConfigError(
                f"--max-executors ({self.max_executors}) must be >= --min-executors "
                f"({self.min_executors})"
            )
        if self.interval_s <= 0:
            raise ConfigError("--autoscale-interval must be > 0 seconds")
        if self.surge_share < 0:
            raise ConfigError("--surge-share must be >= 0 (0: no surge assumed)")

    def policy_config(
        self, trigger_interval_s: float = 1.0, max_records_per_trigger: int | None = None
    ) -> PolicyConfig:
        """The policy's configuration; the query's trigger interval and batch limit bound
        what one executor can do per interval (the capacity model's fixed cost per batch)."""
        return PolicyConfig(
            kind=self.policy,
            min_executors=self.min_executors,
            max_executors=self.max_executors,
            stabilization_window_s=self.stabilization_window_s,
            lag_threshold=self.lag_threshold,
            surge_share=self.surge_share,
            reverse_for_slo=self.reverse_for_slo,
            trigger_interval_s=trigger_interval_s,
            max_records_per_trigger=max_records_per_trigger,
        )


def elastic_conf(master: str, options: AutoscaleOptions) -> dict[str, str]:
    """Spark settings a cluster manager needs for the autoscaler to drive executors.

    Kubernetes: dynamic allocation off (the autoscaler kills executors, which Spark refuses
    with it on); the application starts ``min_executors`` executor pods of one core; the pod
    allocator creates up to ``max_executors`` pods in one round
    (``spark.kubernetes.allocation.batch.size``), so a scale-out from the minimum to the
    maximum is not spread over several rounds of ``spark.kubernetes.allocation.batch.delay``.
    """
    if master.startswith("spark://"):
        from streamscale.cluster import app_conf

        return app_conf(master, options.max_executors)
    if master.startswith("k8s://"):
        return {
            "spark.dynamicAllocation.enabled": "false",
            "spark.executor.instances": str(options.min_executors),
            "spark.executor.cores": "1",
            "spark.kubernetes.allocation.batch.size": str(options.max_executors),
        }
    raise ConfigError(
        f"--autoscale needs a cluster manager that takes executor requests (spark://, k8s://); "
        f"the master is {master}"
    )


def _int_option(sources: list[tuple[str, dict[str, str]]], key: str) -> int | None:
    """An integer option summed over the sources; None unless every source sets it."""
    values = [o.get(key) for _, o in sources]
    if not values or any(not v for v in values):
        return None
    return sum(int(str(v)) for v in values)


def _trigger_s(execution: Any) -> float | None:
    trigger = execution.trigger()
    if trigger.getClass().getSimpleName() == "ProcessingTimeTrigger":
        return float(trigger.intervalMs()) / 1000.0
    return None


class QueryLimitsReader:
    """What a running query's options say of its batches (``minPartitions``,
    ``maxOffsetsPerTrigger`` of its Kafka sources, its trigger), read once per run from the
    JVM; None while the query is unknown or its plan unreadable (it is starting)."""

    def __init__(self, spark: Any) -> None:
        self._spark = spark
        self._known: dict[tuple[str, str], QueryLimits] = {}
        self._lock = threading.Lock()

    def __call__(self, name: str) -> QueryLimits | None:
        from streamscale.kafka.commits import jvm_source_options

        for query in self._spark.streams.active:
            if (query.name or str(query.id)) != name:
                continue
            key = (name, str(query.runId))
            with self._lock:
                if key in self._known:
                    return self._known[key]
            try:
                execution = query._jsq.streamingQuery()
                sources = jvm_source_options(execution)
                if not sources:
                    return None
                found = QueryLimits(
                    min_partitions=_int_option(sources, "minPartitions"),
                    max_offsets_per_trigger=_int_option(sources, "maxOffsetsPerTrigger"),
                    trigger_interval_s=_trigger_s(execution),
                )
            except Exception as exc:  # the plan is not readable yet (the query is starting)
                log.debug("options of %s not readable yet: %s", name, exc)
                return None
            with self._lock:
                self._known[key] = found
            return found
        return None


def start_autoscaler(
    spark: Any,
    query: str | Sequence[str] | None,
    tracker: SnapshotSource,
    options: AutoscaleOptions,
    *,
    splits_per_partition: int = 1,
    settings: Settings | None = None,
    on_decision: Callable[[DecisionRecord], None] | None = None,
    register_timeout_s: float = 30.0,
    grantable: int | None = None,
) -> Controller:
    """Bring the application to ``min_executors`` and start controlling ``query`` (a name,
    several names, or None: every Kafka query of the session, their need summed).

    ``settings`` gives the query's trigger interval and batch limit, which bound what an
    executor can do per interval (the policy's defaults otherwise).

    A standalone application is granted ``spark.cores.max`` worth of executors at start
    (dynamic allocation off), so the first act is to scale down to the minimum — once those
    executors have registered, or a kill issued before would miss them. On Kubernetes the
    application starts ``spark.executor.instances`` executor pods, which is what the start
    waits for (:func:`~streamscale.autoscale.actuator.initial_executors`), not the maximum
    that will never come. ``grantable``: how many the cluster can grant now, when known
    (attach reads it from the standalone Master); the start waits for no more than that.
    """
    from streamscale.autoscale.actuator import SparkActuator, initial_executors

    master = str(spark.sparkContext.master)
    if master.startswith("local"):
        raise ScalingError(
            f"the master is {master}: autoscaling needs a cluster manager that takes executor "
            "requests (standalone spark://, Kubernetes), not local mode"
        )
    actuator = SparkActuator(spark)
    conf = {str(k): str(v) for k, v in spark.sparkContext.getConf().getAll()}
    granted = initial_executors({"spark.master": master, **conf}, options.max_executors)
    if grantable is not None:
        granted = min(granted, grantable)
    deadline = time.monotonic() + register_timeout_s
    while actuator.running() < granted and time.monotonic() < deadline:
        time.sleep(0.2)
    result = actuator.apply(options.min_executors)
    with contextlib.suppress(TimeoutError):
        actuator.wait_for(options.min_executors, timeout_s=register_timeout_s)
    if not result.ok:
        raise ScalingError(
            f"the cluster manager refused executor requests ({result.error}): autoscaling "
            "needs a cluster manager that takes them (standalone, Kubernetes), not local[*]"
        )
    controller = Controller(
        query if query is None or isinstance(query, str) else tuple(query),
        tracker,
        actuator,
        options.policy_config(settings.trigger_interval_s, settings.max_offsets_per_trigger)
        if settings is not None
        else options.policy_config(),
        interval_s=options.interval_s,
        splits_per_partition=splits_per_partition,
        limits=QueryLimitsReader(spark),
        decision_log=options.decision_log,
        on_decision=on_decision,
    )
    controller.target = result.target
    controller.start()
    return controller
