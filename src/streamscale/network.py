"""Which address the driver advertises and binds to, from the settings or the route to the
Spark master: loopback only when everything runs on this machine.

Executors call the driver back at ``spark.driver.host``; a driver that advertises 127.0.0.1
to executors on another host is never reached (they exit with code 1, one after the other).
So the address is, in order: ``STREAMSCALE_DRIVER_HOST`` when set; 127.0.0.1 for local mode
and for a master on loopback (the local conveniences); otherwise the local address of the
route to the master's host — the address the kernel would send from to reach it, found by
``connect()``-ing a UDP socket (no packet is sent) and reading ``getsockname()``.
The bind address is ``STREAMSCALE_DRIVER_BIND_ADDRESS`` when set (0.0.0.0 behind NAT, where
the advertised address is not one of this host's), else the advertised one.

The parsing and the choice are pure (:func:`driver_addresses` takes the route as a function);
:func:`route_address` is the one I/O edge.
"""

from __future__ import annotations

import ipaddress
import re
import socket
from collections.abc import Callable
from urllib.parse import urlsplit

from streamscale.errors import ConfigError

LOOPBACK = "127.0.0.1"
LOOPBACK_NAMES = frozenset({"127.0.0.1", "localhost", "::1"})
_HOSTNAME = re.compile(
    r"^(?=.{1,253}$)[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*$"
)

Route = Callable[[str, int], str]
"""The local address of the route to ``(host, port)``."""


class NetworkError(ConfigError):
    """An address that cannot be used, or no route to the master's host."""


def check_host(value: str, setting: str) -> str:
    """``value`` as an IP address or a host name (no port, no scheme); a one-line error naming
    ``setting`` otherwise."""
    text = value.strip()
    try:
        return str(ipaddress.ip_address(text))
    except ValueError:
        pass
    if _HOSTNAME.match(text) and not text.replace(".", "").isdigit():
        return text
    raise NetworkError(
        f"{setting}={value!r} is not an IP address or a host name (no port, no scheme): "
        "set it to this host's address as the others reach it, e.g. 10.0.0.5"
    )


def master_hosts(master: str) -> list[tuple[str, int]]:
    """The ``(host, port)`` of each master of a ``spark://`` URL (``spark://a:7077,b:7077``
    lists standbys); ``[]`` for other masters (local mode, ``k8s://`` gives the API server)."""
    if master.startswith("k8s://"):
        url = master.removeprefix("k8s://")
        parts = urlsplit(url if "://" in url else f"https://{url}")
        if parts.hostname is None:
            return []
        return [(parts.hostname, parts.port or (443 if parts.scheme == "https" else 80))]
    if not master.startswith("spark://"):
        return []
    found = []
    for item in master.removeprefix("spark://").split(","):
        parts = urlsplit(f"spark://{item.strip()}")
        if parts.hostname:
            found.append((parts.hostname, parts.port or 7077))
    return found


def on_this_machine(master: str) -> bool:
    """Local mode, or every master on loopback: the driver needs no other address."""
    if master.startswith("local"):
        return True
    hosts = master_hosts(master)
    return bool(hosts) and all(h in LOOPBACK_NAMES for h, _ in hosts)


def route_address(host: str, port: int) -> str:
    """The local address this machine would use to reach ``host:port`` (a UDP socket's
    ``connect()`` picks the route and the source address; nothing is sent)."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_DGRAM)
    except OSError as exc:
        raise NetworkError(
            f"the master's host {host!r} does not resolve ({exc}): set STREAMSCALE_DRIVER_HOST"
        ) from exc
    last: OSError | None = None
    for family, kind, proto, _, address in infos:
        with socket.socket(family, kind, proto) as sock:
            try:
                sock.connect(address)
                return str(sock.getsockname()[0])
            except OSError as exc:
                last = exc
    raise NetworkError(
        f"no route to the master's host {host} ({last}): set STREAMSCALE_DRIVER_HOST to "
        "the address its executors can reach this driver at"
    )


def driver_addresses(
    master: str,
    driver_host: str | None = None,
    bind_address: str | None = None,
    *,
    route: Route = route_address,
) -> dict[str, str]:
    """``spark.driver.host`` and ``spark.driver.bindAddress`` for a driver on ``master``.

    ``driver_host`` (``STREAMSCALE_DRIVER_HOST``) wins; else loopback when
    :func:`on_this_machine`; else the route to the (first) master's host. Kubernetes in
    cluster mode sets the driver pod's address itself: there, without a setting, nothing is
    set. ``bind_address`` defaults to the advertised address.
    """
    host = driver_host
    if host is None:
        if on_this_machine(master):
            host = LOOPBACK
        elif master.startswith("spark://") or master.startswith("k8s://"):
            hosts = master_hosts(master)
            if not hosts:
                raise NetworkError(f"no host in the master URL {master!r}")
            host = route(*hosts[0])
        else:
            return {} if bind_address is None else {"spark.driver.bindAddress": bind_address}
    return {"spark.driver.host": host, "spark.driver.bindAddress": bind_address or host}
