"""Keep Python's cyclic garbage collector out of the per-record path of Spark's Python workers.

A task allocates a few GC-tracked objects per record (messages, timestamp tuples) that live
until their Arrow batch is built, and PySpark's worker daemon runs a full ``gc.collect()``
after every task over everything the worker imported (about 80,000 objects, 35 ms). Both
cost more than reading does. Tasks therefore run with the collector paused, and the
long-lived objects present at a worker's first task are frozen out of later collections.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

_frozen = False


@contextmanager
def collector_paused() -> Iterator[None]:
    """Run a task with the cyclic collector paused; restore its previous state on exit.

    Nothing the readers and writers build forms reference cycles, so reference counting alone
    frees it. The first call in a process also freezes what the worker has imported.
    """
    global _frozen
    if not _frozen:
        gc.collect()
        gc.freeze()
        _frozen = True
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
