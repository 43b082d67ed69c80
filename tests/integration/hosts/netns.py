"""Hosts of their own on this machine: Linux network namespaces joined by veth pairs to a
bridge, with addresses in 198.18.0.0/24 (a benchmarking range that never leaves the machine).

Every name the harness creates starts with :data:`PREFIX` (``ss-``): namespace ``ss-<host>``,
its veth end on the bridge ``ss-<host>`` (``eth0`` inside), the bridge ``ss-br`` with
198.18.0.1 (the test process, in the root namespace, reaches every host through it). A
leftover of a run that died is removed at the next start (:func:`remove_leftovers`: only
names with the prefix), and :meth:`Network.destroy` runs on any exit (``finally`` and
``atexit``). One harness at a time on a machine: an exclusive lock on :data:`LOCK`.

Faults, as on real networks, with ``ip`` only:

- :meth:`Network.link_down` / :meth:`link_up`: the host's veth goes down (its cable pulled):
  nobody reaches it, no packet is answered, no connection is reset;
- :meth:`Network.isolate` / :meth:`heal`: blackhole routes in the hosts on both sides, so that
  the host no longer reaches some peers nor they it, while everyone else still does (a broker
  cut off from the other brokers, still reached by clients, as Jepsen partitions do).
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import os
import shutil
import subprocess
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import IO

PREFIX = "ss-"
BRIDGE = f"{PREFIX}br"
SUBNET = "198.18.0"
GATEWAY = f"{SUBNET}.1"
LOCK = "/tmp/streamscale-hosts.lock"


class NetnsError(RuntimeError):
    """An ``ip`` command failed."""


def ip(*args: str, check: bool = True) -> str:
    done = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)
    if check and done.returncode != 0:
        raise NetnsError(f"ip {' '.join(args)}: {done.stderr.strip()}")
    return done.stdout


def unavailable() -> str | None:
    """Why namespaces cannot be made here (None: they can)."""
    if os.geteuid() != 0:
        return "the multi-host tests create network namespaces: they need root"
    if shutil.which("ip") is None:
        return "the multi-host tests need `ip` (Debian package iproute2; `make setup` installs it)"
    return None


def namespaces() -> list[str]:
    return [line.split()[0] for line in ip("netns", "list").splitlines() if line.strip()]


def links() -> list[str]:
    names = []
    for line in ip("-o", "link", "show").splitlines():
        parts = line.split(":", 2)
        if len(parts) > 1:
            names.append(parts[1].strip().split("@")[0])
    return names


def remove_leftovers() -> list[str]:
    """Delete the namespaces and links a dead harness left (names with :data:`PREFIX` only);
    return what was removed."""
    removed = []
    for name in namespaces():
        if name.startswith(PREFIX):
            ip("netns", "delete", name, check=False)
            removed.append(name)
    for name in links():
        if name.startswith(PREFIX):
            ip("link", "delete", name, check=False)
            removed.append(name)
    return removed


@dataclass
class Network:
    """The bridge and the hosts created on it, by name (``kafka1``...) and address."""

    hosts: dict[str, str] = field(default_factory=dict)
    _lock: IO[str] | None = None
    _blackholes: set[tuple[str, str]] = field(default_factory=set)

    def ns(self, host: str) -> str:
        return f"{PREFIX}{host}"

    def prefix(self, host: str) -> list[str]:
        """The command prefix that runs a program on ``host`` (``ip netns exec`` execs it:
        the PID is the program's)."""
        return ["ip", "netns", "exec", self.ns(host)]

    def create(self, hosts: dict[str, int]) -> Network:
        """The bridge, then one namespace per host with address ``198.18.0.<n>``."""
        self._lock = open(LOCK, "w")  # noqa: SIM115 (held until destroy)
        fcntl.flock(self._lock, fcntl.LOCK_EX)
        atexit.register(self.destroy)
        remove_leftovers()
        ip("link", "add", BRIDGE, "type", "bridge")
        # Bridged frames must not go through the root namespace's iptables (br_netfilter).
        ip("link", "set", BRIDGE, "type", "bridge", "nf_call_iptables", "0", check=False)
        ip("addr", "add", f"{GATEWAY}/24", "dev", BRIDGE)
        ip("link", "set", BRIDGE, "up")
        for name, n in hosts.items():
            ns, address = self.ns(name), f"{SUBNET}.{n}"
            ip("netns", "add", ns)
            ip("link", "add", ns, "type", "veth", "peer", "name", "eth0", "netns", ns)
            ip("link", "set", ns, "master", BRIDGE, "up")
            ip("-n", ns, "addr", "add", f"{address}/24", "dev", "eth0")
            ip("-n", ns, "link", "set", "eth0", "up")
            ip("-n", ns, "link", "set", "lo", "up")
            self.hosts[name] = address
        return self

    def address(self, host: str) -> str:
        return self.hosts[host]

    def link_down(self, host: str) -> None:
        ip("link", "set", self.ns(host), "down")

    def link_up(self, host: str) -> None:
        ip("link", "set", self.ns(host), "up")

    def isolate(self, host: str, peers: Iterable[str]) -> None:
        """``host`` and ``peers`` stop reaching each other (both directions); the rest of the
        network still reaches both."""
        for peer in peers:
            for a, b in ((host, peer), (peer, host)):
                ip("-n", self.ns(a), "route", "add", "blackhole", f"{self.hosts[b]}/32")
                self._blackholes.add((a, b))

    def heal(self) -> None:
        """Remove every blackhole route :meth:`isolate` added."""
        for a, b in sorted(self._blackholes):
            ip("-n", self.ns(a), "route", "del", "blackhole", f"{self.hosts[b]}/32", check=False)
        self._blackholes.clear()

    def destroy(self) -> None:
        """Delete every namespace and link created (idempotent), then release the lock."""
        for name in list(self.hosts):
            ip("netns", "delete", self.ns(name), check=False)
            if self.ns(name) in links():
                ip("link", "delete", self.ns(name), check=False)
        if BRIDGE in links():
            ip("link", "delete", BRIDGE, check=False)
        self.hosts.clear()
        if self._lock is not None:
            with contextlib.suppress(OSError):
                fcntl.flock(self._lock, fcntl.LOCK_UN)
                self._lock.close()
            self._lock = None

    def leftovers(self) -> Sequence[str]:
        """What of the harness's names still exists (empty after :meth:`destroy`)."""
        return [n for n in [*namespaces(), *links()] if n.startswith(PREFIX)]
