"""CPU seconds per process class (broker, Spark JVM, Python workers), read from /proc.

Used by the benchmarks to say where a run's CPU went, in microseconds per record: on this
2-core machine the broker, the JVM and the Python workers share the same cores, so the
sum, not any one part, sets the ceiling.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterable
from typing import Any

from streamscale import processes

TICK = os.sysconf("SC_CLK_TCK")


def _kind(pid: str, cmd: str) -> str:
    if "kafka.Kafka" in cmd:
        return "broker"
    if "streamscale-kstreams" in cmd:  # benchmarks/kstreams' applications
        return "kafka streams jvm"
    if cmd.split(" ")[0].endswith("java"):
        return "spark jvm"
    if "pyspark.daemon" in cmd:
        return "python workers"
    if pid == str(os.getpid()):
        return "benchmark process"
    return "other (kernel, exited workers)"


def snapshot(root: int | None = None) -> dict[tuple[str, str], float]:
    """CPU seconds (user + system) of every process now (with ``root``, of that process and
    those below it only), keyed by (pid, kind)."""
    out: dict[tuple[str, str], float] = {}
    pids = (
        [str(root), *(str(p) for p in processes.descendants(root))]
        if root is not None
        else os.listdir("/proc")
    )
    for pid in pids:
        fields = processes.stat_fields(pid) if pid.isdigit() else None
        try:
            with open(f"/proc/{pid}/cmdline") as f:
                cmd = f.read().replace("\0", " ")
        except OSError:
            continue
        if fields is not None:
            out[(pid, _kind(pid, cmd))] = (int(fields[11]) + int(fields[12])) / TICK
    return out


def spent(
    before: dict[tuple[str, str], float], after: dict[tuple[str, str], float]
) -> dict[str, float]:
    """CPU seconds by kind between two snapshots (processes alive at ``after``)."""
    out: dict[str, float] = {}
    for key, seconds in after.items():
        out[key[1]] = out.get(key[1], 0.0) + seconds - before.get(key, 0.0)
    return out


def per_record(
    before: dict[tuple[str, str], float], after: dict[tuple[str, str], float], records: int
) -> str:
    """One line: CPU microseconds per record by kind, largest first, and the total."""
    spent: dict[str, float] = {}
    for key, seconds in after.items():
        spent[key[1]] = spent.get(key[1], 0.0) + seconds - before.get(key, 0.0)
    shown = sorted(((k, v) for k, v in spent.items() if v >= 0.05), key=lambda kv: -kv[1])
    total = sum(v for _, v in shown)
    parts = ", ".join(f"{k} {v / records * 1e6:.2f}" for k, v in shown)
    return f"CPU µs/record: {parts}; total {total / records * 1e6:.2f}"


class BatchCpu:
    """Snapshots at each micro-batch's progress event, to charge CPU to the steady batches.

    Progress events arrive on Spark's listener bus a little after each batch ends: close
    enough at batches of seconds.
    """

    def __init__(self, spark: Any, root: int | None = None) -> None:
        """``root``: snapshots of that process and those below it only (see :func:`snapshot`)."""
        from streamscale.progress_events import JsonProgressListener

        self.marks: list[tuple[int, dict[tuple[str, str], float]]] = []
        marks = self.marks

        class Listener(JsonProgressListener):
            def onQueryStarted(self, event: Any) -> None:
                pass

            def onQueryProgress(self, event: Any) -> None:
                if event.progress.numInputRows:
                    marks.append((int(event.progress.numInputRows), snapshot(root)))

            def onQueryIdle(self, event: Any) -> None:
                pass

            def onQueryTerminated(self, event: Any) -> None:
                pass

        self.listener = Listener()
        self.spark = spark
        spark.streams.addListener(self.listener)

    def steady(self) -> str:
        """CPU per record over batches 2+ (after the first, which starts the workers)."""
        time.sleep(1.0)  # let the last progress event arrive
        self.spark.streams.removeListener(self.listener)
        if len(self.marks) < 2:
            return "CPU: fewer than two batches"
        records = sum(n for n, _ in self.marks[1:])
        return per_record(self.marks[0][1], self.marks[-1][1], records)

    def steady_spent(self) -> tuple[int, dict[str, float]]:
        """Records of batches 2+ and the CPU seconds by kind spent on them (call after
        :meth:`steady`)."""
        if len(self.marks) < 2:
            return 0, {}
        records = sum(n for n, _ in self.marks[1:])
        return records, spent(self.marks[0][1], self.marks[-1][1])


def _status_kb(pid: str, field: str) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(f"{field}:"):
                return int(line.split()[1])
    return 0


def _processes(kinds: Iterable[str], root: int | None) -> list[str]:
    """The PIDs of these kinds (with ``root``, below that PID only), each address space once
    (:func:`streamscale.processes.one_per_address_space`: a JVM's child that has not yet
    exec'd carries its command line and whole RSS; seen several times a batch from a 5.8 GB
    Spark JVM, Hadoop's ``readlink`` on checkpoint files, and a sampled peak of 10.7 GB where
    another sampler of the same run saw 5.4 GB)."""
    wanted = set(kinds)
    pids = (
        processes.descendants(root)
        if root is not None
        else [int(p) for p in os.listdir("/proc") if p.isdigit()]
    )
    found = {
        pid: parent_cmd
        for pid, parent_cmd in processes.commands(pids).items()
        if _kind(str(pid), parent_cmd[1]) in wanted
    }
    return [str(pid) for pid in processes.one_per_address_space(found)]


def _summed_mb(field: str, kinds: Iterable[str], root: int | None) -> float:
    """``field`` of ``/proc/PID/status`` (kB) summed over :func:`_processes`, in MB."""
    total = 0
    for pid in _processes(kinds, root):
        try:
            total += _status_kb(pid, field)
        except OSError:
            continue
    return total / 1024


def rss_mb(kinds: Iterable[str], root: int | None = None) -> float:
    """Summed resident memory (VmRSS, MB) of the processes of these kinds now (with ``root``,
    only the processes below that PID: not other work on a shared machine), each address
    space once (see :func:`_processes`)."""
    return _summed_mb("VmRSS", kinds, root)


def hwm_mb(kinds: Iterable[str], root: int | None = None) -> float:
    """Summed peak resident memory (VmHWM, MB: the kernel's high-water mark over each
    process's life, nothing missed between samples) of the processes of these kinds alive
    now, each address space once."""
    return _summed_mb("VmHWM", kinds, root)


class RssPeak:
    """Peak of :func:`rss_mb` over a span, sampled every ``interval`` s in a thread."""

    def __init__(
        self, kinds: Iterable[str], interval: float = 0.25, root: int | None = None
    ) -> None:
        self.kinds = tuple(kinds)
        self.root = root
        self.interval = interval
        self.peak = 0.0
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._done.is_set():
            self.peak = max(self.peak, rss_mb(self.kinds, self.root))
            self._done.wait(self.interval)

    def stop(self) -> float:
        self._done.set()
        self._thread.join(5)
        return max(self.peak, rss_mb(self.kinds, self.root))
