"""Streaming query listeners that receive each progress event as its JSON.

PySpark hands a Python ``StreamingQueryListener`` every ``QueryProgressEvent`` converted
field by field over py4j (``StreamingQueryProgress.fromJObject``): a round trip per field and
per element of each of its Java maps and lists, and the end of every one of those maps and
lists raises a Java exception that PySpark converts by asking the JVM, class by class, what
it is; each such question looks up a class name that does not exist through the whole class
path. Measured on game sessions with 1.25 s triggers: a fifth of Spark's JVM time at 2,000
records/s (docs/sustainable.md), once for each listener, in every micro-batch.

:class:`JsonProgressListener` is a ``StreamingQueryListener`` (``spark.streams.addListener``
takes it) whose progress events come as PySpark builds ``StreamingQuery.lastProgress``: the
progress's JSON, read in one call and parsed in Python (``StreamingQueryProgress.fromJson``),
so a listener sees the same ``QueryProgressEvent`` type either way. The other events (start,
idle, end) carry no collections and keep PySpark's conversion.
"""

from __future__ import annotations

import json
from typing import Any

from pyspark.sql.streaming.listener import (
    JStreamingQueryListener,
    QueryProgressEvent,
    StreamingQueryListener,
)

__all__ = ["JsonProgressListener", "progress_event"]


def progress_event(jevent: Any) -> QueryProgressEvent:
    """A JVM ``QueryProgressEvent`` as PySpark's, from the progress's JSON (one py4j call)."""
    return QueryProgressEvent.fromJson({"progress": json.loads(jevent.progress().json())})


class _JsonEvents(JStreamingQueryListener):  # type: ignore[misc]
    """The py4j callback Spark's ``PythonStreamingQueryListenerWrapper`` calls."""

    def onQueryProgress(self, jevent: Any) -> None:
        self.pylistener.onQueryProgress(progress_event(jevent))


class JsonProgressListener(StreamingQueryListener):  # type: ignore[misc]
    """A ``StreamingQueryListener`` whose progress events are read as their JSON: subclass
    it as PySpark's (the same four callbacks, the same event types)."""

    @property
    def _jlistener(self) -> Any:
        from pyspark import SparkContext

        if not hasattr(self, "_jlistenerobj"):
            jvm: Any = SparkContext._jvm
            self._jlistenerobj = jvm.PythonStreamingQueryListenerWrapper(_JsonEvents(self))
        return self._jlistenerobj
