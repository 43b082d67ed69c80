"""streamscale: elastic PySpark Structured Streaming on Kafka.

The public entry point is :func:`attach`: it autoscales the streaming queries of a running
SparkSession (see :mod:`streamscale.autoscale.attach`). Every error streamscale raises on
purpose is a :class:`Error` (:mod:`streamscale.errors`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from streamscale.errors import (
    ConfigError,
    Error,
    KafkaRequestError,
    LaunchError,
    PipelineError,
    RecordError,
    ScalingError,
)

if TYPE_CHECKING:
    from streamscale.autoscale.attach import Autoscaler

__all__ = [
    "ConfigError",
    "Error",
    "KafkaRequestError",
    "LaunchError",
    "PipelineError",
    "RecordError",
    "ScalingError",
    "attach",
]


def attach(spark: Any, **options: Any) -> Autoscaler:
    """Autoscale ``spark``'s streaming queries: :func:`streamscale.autoscale.attach.attach`.

    Imported on first call, so that ``import streamscale`` stays light.
    """
    from streamscale.autoscale.attach import attach as _attach

    return _attach(spark, **options)
