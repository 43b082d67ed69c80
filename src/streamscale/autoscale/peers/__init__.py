"""The policies a user would run instead of ``rate``, each as the simulator runs ``rate``.

Each peer is one module, written from its project's source and docs (cited in its
docstring), pure (no I/O), and decides as :func:`streamscale.autoscale.policy.decide` does: a
function of (its config, its state, an :class:`~streamscale.autoscale.policy.Observation`)
that returns a :class:`~streamscale.autoscale.policy.Decision` and its next state. The
simulator builds the observation the same way for every strategy, so the peers see what the
production controller sees: the input rates, the records lag per partition, the time lag, the
recent micro-batches, the executors running and pending.

- ``flink`` / ``flink-tuned``: the Flink Kubernetes operator's autoscaler (FLIP-271);
- ``ds2``: DS2 (Kalavri et al., OSDI 2018);
- ``keda-hpa`` / ``keda-hpa-tuned``: KEDA's Kafka scaler driving a HorizontalPodAutoscaler v2;
- ``spark-dynamic``: Spark's dynamic allocation (``ExecutorAllocationManager``);
- ``spark-streaming``: the DStreams rule (``streaming.scheduler.ExecutorAllocationManager``).

Each runs at its published defaults; ``-tuned`` runs once tuned to this project's objective
(a 30 s time lag) where its docs say how (Flink: catch-up duration and windows; KEDA:
``lagThreshold``). DS2 has no latency knob; Spark's two rules have none either (their
timeouts are about idleness, not lag), so they run at their defaults only.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from streamscale.autoscale import policy
from streamscale.autoscale.peers import ds2, flink, keda_hpa, spark_dynamic
from streamscale.errors import ConfigError

C = TypeVar("C")
S = TypeVar("S")


@dataclass(frozen=True)
class Peer(Generic[C, S]):
    """A peer policy ready to run: its name, its config, its state before the first
    observation and its decision function (the shape of :func:`policy.decide`)."""

    name: str
    config: C
    state: S
    decide: Callable[[C, S, policy.Observation], tuple[policy.Decision, S]]


PEER_NAMES = (
    "flink",
    "flink-tuned",
    "ds2",
    "keda-hpa",
    "keda-hpa-tuned",
    "spark-dynamic",
    "spark-streaming",
)
"""Every peer :func:`named` knows, in the order the comparisons list them."""


def named(
    name: str, config: policy.PolicyConfig, executor_rate: float, batch_fixed_cost_s: float
) -> Peer[Any, Any]:
    """The peer called ``name``, within ``config``'s bounds and with what the cluster measured
    (start delay, rescale pause, state reload, decision interval); ``executor_rate`` (records/s
    of one executor) sizes KEDA's tuned ``lagThreshold``; ``batch_fixed_cost_s`` (the seconds
    of a batch no task spends, which Spark's task metrics leave out) gives Flink and DS2 their
    busy time. A ConfigError for an unknown name."""
    if name in ("flink", "flink-tuned"):
        make = flink.defaults if name == "flink" else flink.tuned
        return Peer(name, make(config, batch_fixed_cost_s), flink.FlinkState(), flink.decide)
    if name == "ds2":
        ds = ds2.defaults(config, batch_fixed_cost_s)
        return Peer(name, ds, ds2.DS2State(), ds2.decide)
    if name in ("keda-hpa", "keda-hpa-tuned"):
        kc = keda_hpa.defaults(config)
        if name == "keda-hpa-tuned":
            kc = keda_hpa.tuned(config, executor_rate)
        return Peer(name, kc, keda_hpa.HpaState(), keda_hpa.decide)
    if name == "spark-dynamic":
        sc = spark_dynamic.defaults(config)
        return Peer(name, sc, spark_dynamic.DynamicState(), spark_dynamic.decide)
    if name == "spark-streaming":
        dc = spark_dynamic.streaming_defaults(config)
        return Peer(name, dc, spark_dynamic.StreamingState(), spark_dynamic.decide_streaming)
    raise ConfigError(f"{name}: unknown peer policy ({', '.join(PEER_NAMES)})")
