"""Start and stop the processes streamscale owns (broker, Spark master/workers, Prometheus).

Every process is started in its own session with its output in a log file, and its PID (and
any facts such as an address) is recorded in a JSON state file, so that a later command can
stop it by PID, and tests can stop everything they started.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from streamscale.errors import LaunchError


class ProcessError(LaunchError):
    """A managed process failed to start or to stop."""


@dataclass(frozen=True)
class ManagedProcess:
    """A process started by streamscale, as recorded in its state file."""

    name: str
    pid: int
    log: str
    argv: list[str]
    info: dict[str, Any] = field(default_factory=dict)

    def alive(self) -> bool:
        return pid_alive(self.pid)


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port free on ``host`` right now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def free_ports(count: int, host: str = "127.0.0.1", taken: Iterable[int] = ()) -> list[int]:
    """``count`` distinct TCP ports free on ``host`` right now, none of ``taken``: their
    sockets are held open together while the OS picks them (one :func:`free_port` after
    another may return a port twice, before anything has bound the first)."""
    avoid = set(taken)
    held: list[socket.socket] = []
    ports: list[int] = []
    try:
        while len(ports) < count:
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            held.append(sock)
            sock.bind((host, 0))
            port = int(sock.getsockname()[1])
            if port not in avoid:
                avoid.add(port)
                ports.append(port)
    finally:
        for sock in held:
            sock.close()
    return ports


def port_in_use(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(0.5)
        return sock.connect_ex((host, port)) == 0


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie child still answers kill(0): reap it if it is ours.
    with contextlib.suppress(ChildProcessError):
        done, _ = os.waitpid(pid, os.WNOHANG)
        if done == pid:
            return False
    return True


def state_path(data_dir: Path, name: str) -> Path:
    return data_dir / f"{name}.json"


def start(
    name: str,
    argv: Sequence[str],
    data_dir: Path,
    *,
    env: Mapping[str, str] | None = None,
    info: Mapping[str, Any] | None = None,
    ready: Callable[[], bool] | None = None,
    ready_timeout_s: float = 30.0,
) -> ManagedProcess:
    """Start ``argv`` in the background, wait until ``ready()`` holds, record its PID.

    Raises :class:`ProcessError` (with the log's tail) if it exits or is not ready in time.
    """
    data_dir.mkdir(parents=True, exist_ok=True)
    log = data_dir / f"{name}.log"
    with open(log, "ab") as out:
        proc = subprocess.Popen(
            list(argv),
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env={**os.environ, **(env or {})},
            start_new_session=True,
        )
    managed = ManagedProcess(name, proc.pid, str(log), list(argv), dict(info or {}))
    state_path(data_dir, name).write_text(json.dumps(asdict(managed), indent=2))
    deadline = time.monotonic() + ready_timeout_s
    while True:
        code = proc.poll()
        if code is not None:
            state_path(data_dir, name).unlink(missing_ok=True)
            raise ProcessError(f"{name} exited with code {code} at start: {tail(log)}")
        if ready is None or ready():
            return managed
        if time.monotonic() > deadline:
            stop_pid(proc.pid)
            state_path(data_dir, name).unlink(missing_ok=True)
            raise ProcessError(f"{name} not ready after {ready_timeout_s:.0f} s: {tail(log)}")
        time.sleep(0.05)


def load(data_dir: Path, name: str) -> ManagedProcess | None:
    """The recorded process ``name`` in ``data_dir``, or None if none is recorded."""
    path = state_path(data_dir, name)
    if not path.exists():
        return None
    raw = json.loads(path.read_text())
    return ManagedProcess(**raw)


def stop_pid(pid: int, timeout_s: float = 10.0) -> None:
    """SIGTERM the process group of ``pid``, then SIGKILL after ``timeout_s``."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(pid, sig)
        except ProcessLookupError:
            return
        except PermissionError:
            os.kill(pid, sig)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if not pid_alive(pid):
                return
            time.sleep(0.05)
    if pid_alive(pid):
        raise ProcessError(f"process {pid} did not stop")


def stop(data_dir: Path, name: str, timeout_s: float = 10.0) -> bool:
    """Stop the recorded process ``name``; False if none was recorded or it was gone."""
    managed = load(data_dir, name)
    if managed is None:
        return False
    was_alive = managed.alive()
    if was_alive:
        stop_pid(managed.pid, timeout_s)
    state_path(data_dir, name).unlink(missing_ok=True)
    return was_alive


def stop_all(data_dir: Path, names: Sequence[str], grace_s: float = 10.0) -> bool:
    """Stop the recorded processes ``names`` together: SIGTERM to every one at once, SIGKILL
    to those still alive after ``grace_s`` (0: SIGKILL at once). False if none was running.

    Together, because members of one cluster wait for each other while they shut down.
    """
    recorded = [m for m in (load(data_dir, n) for n in names) if m is not None]
    alive = [m for m in recorded if m.alive()]
    for sig in (signal.SIGKILL,) if grace_s <= 0 else (signal.SIGTERM, signal.SIGKILL):
        for managed in alive:
            with contextlib.suppress(ProcessLookupError):
                try:
                    os.killpg(managed.pid, sig)
                except PermissionError:
                    os.kill(managed.pid, sig)
        deadline = time.monotonic() + (grace_s if sig == signal.SIGTERM else 10.0)
        while time.monotonic() < deadline and any(m.alive() for m in alive):
            time.sleep(0.05)
        if not any(m.alive() for m in alive):
            break
    stuck = [m.pid for m in alive if m.alive()]
    if stuck:
        raise ProcessError(f"processes {stuck} did not stop")
    for managed in recorded:
        state_path(data_dir, managed.name).unlink(missing_ok=True)
    return bool(alive)


def stat_fields(pid: int | str) -> list[str] | None:
    """The fields of ``/proc/PID/stat`` after the command name (``[0]`` state, ``[1]`` parent
    PID, ``[11]``/``[12]`` user/system clock ticks); None if the process is gone (Linux)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
    except OSError:
        return None
    # "pid (comm) state ppid ...": comm may hold spaces, so split after the last ')'.
    return stat.rsplit(")", 1)[-1].split()


def descendants(pid: int) -> list[int]:
    """PIDs of every process below ``pid`` (Linux ``/proc``; empty elsewhere)."""
    if not os.path.isdir("/proc"):
        return []
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        fields = stat_fields(entry) if entry.isdigit() else None
        if fields is not None and len(fields) > 1:
            children.setdefault(int(fields[1]), []).append(int(entry))
    found: list[int] = []
    todo = [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def one_per_address_space(procs: Mapping[int, tuple[int, str]]) -> list[int]:
    """The PIDs of ``procs`` (PID → parent PID, command line), a JVM's address space once.

    A JVM starts its children (Hadoop's ``readlink`` on checkpoint files, several times a
    batch; Spark's Python workers) through ``posix_spawn``: until the child execs, ``/proc``
    shows it with the JVM's command line and the JVM's whole resident memory, and a sum of
    RSS counts the JVM twice. A java process whose parent is in ``procs`` with the same
    command line is that parent's; Python's forked workers are processes of their own and
    stay."""
    return [
        pid
        for pid, (parent, cmd) in procs.items()
        if not (
            cmd.split(" ", 1)[0].endswith("java") and parent in procs and procs[parent][1] == cmd
        )
    ]


def commands(pids: Iterable[int]) -> dict[int, tuple[int, str]]:
    """PID → (parent PID, command line) of the live processes among ``pids`` (Linux
    ``/proc``; the command line's arguments joined by spaces)."""
    procs: dict[int, tuple[int, str]] = {}
    for pid in pids:
        fields = stat_fields(pid)
        try:
            with open(f"/proc/{pid}/cmdline") as f:
                cmd = f.read().replace("\0", " ")
        except OSError:
            continue
        if fields is not None and len(fields) > 1:
            procs[pid] = (int(fields[1]), cmd)
    return procs


def distinct(pids: Sequence[int]) -> list[int]:
    """:func:`one_per_address_space` of the live processes among ``pids`` (Linux ``/proc``)."""
    return one_per_address_space(commands(pids))


def tail(path: Path, lines: int = 5) -> str:
    try:
        text = path.read_text(errors="replace").strip().splitlines()
    except OSError:
        return "(no log)"
    return " | ".join(text[-lines:]) or "(empty log)"


def run_foreground(
    name: str,
    argv: Sequence[str],
    data_dir: Path,
    *,
    env: Mapping[str, str] | None = None,
    grace_s: float = 10.0,
) -> int:
    """Run ``argv`` in the foreground (this process's terminal) in a process group of its
    own, its PID recorded as :func:`start` records it; pass SIGINT and SIGTERM on to that
    group as a terminal would; once it exits, stop what it left behind in its group
    (SIGTERM, SIGKILL after ``grace_s``). Returns its exit code (128 + signal if killed)."""
    data_dir.mkdir(parents=True, exist_ok=True)
    proc = subprocess.Popen(list(argv), env={**os.environ, **(env or {})}, start_new_session=True)
    managed = ManagedProcess(name, proc.pid, "(the terminal)", list(argv))
    state_path(data_dir, name).write_text(json.dumps(asdict(managed), indent=2))

    def forward(signum: int, frame: object) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signum)

    previous = {}
    try:
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(ValueError):  # not the main thread: nothing to pass on
                previous[sig] = signal.signal(sig, forward)
        code = proc.wait()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        stop_group(proc.pid, grace_s)
        state_path(data_dir, name).unlink(missing_ok=True)
    return 128 - code if code < 0 else code


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def stop_group(pgid: int, grace_s: float = 10.0) -> None:
    """Stop every process left in the process group ``pgid`` (its leader may be gone):
    SIGTERM, then SIGKILL after ``grace_s``."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        if not group_alive(pgid):
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, sig)
        deadline = time.monotonic() + (grace_s if sig == signal.SIGTERM else 10.0)
        while time.monotonic() < deadline and group_alive(pgid):
            time.sleep(0.05)
    if group_alive(pgid):
        raise ProcessError(f"process group {pgid} did not stop")
