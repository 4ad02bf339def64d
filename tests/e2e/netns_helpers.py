"""Several "machines" on one host: Linux network namespaces joined by veth pairs to a bridge.

:class:`NamespaceNetwork` makes one namespace per host (each with its own loopback and one
interface, ``eth0``, holding an address of :data:`SUBNET`) and one namespace for the switch (a
bridge joining the other ends of the veth pairs). Every interface is created directly inside its
namespace (``ip link add … netns``), so nothing is added to the test's own namespace, no namespace
has a route beyond the subnet, and traffic stays between these namespaces. Everything is deleted,
by name, on :meth:`NamespaceNetwork.close` (the veths and the bridge go with their namespaces).
Needs root and iproute2's ``ip``; :func:`namespaces_unavailable` says why not, when not.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time

SUBNET_PREFIX = "10.247.13."
"""Hosts get ``10.247.13.1``, ``.2``, … (a /24 that exists only inside these namespaces)."""
PREFIX_LEN = 24


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    result = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)
    if check and result.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)} failed: {result.stderr.strip()}")
    return result


def namespaces_unavailable(probe_name: str) -> str | None:
    """Why network namespaces cannot be made here (not root, no ``ip``, refused), or None.

    The probe namespace ``probe_name`` is deleted again at once.
    """
    if os.geteuid() != 0:
        return "network namespaces need root"
    if shutil.which("ip") is None:
        return "iproute2's ip is not installed"
    added = _ip("netns", "add", probe_name, check=False)
    if added.returncode != 0:
        return f"ip netns add is not permitted here: {added.stderr.strip()}"
    _ip("netns", "del", probe_name, check=False)
    return None


class NamespaceNetwork:
    """Namespaces ``<prefix>-<host>`` for ``hosts``, plus ``<prefix>-sw`` holding the bridge.

    Parameters
    ----------
    prefix : str
        Unique per test run (e.g. with the PID), at most 8 characters.
    hosts : list of str
        Host names, in address order: the first gets ``10.247.13.1``.

    Attributes
    ----------
    address : dict of str to str
        Host name -> its IPv4 address.
    created : list of str
        Namespaces made so far (deleted by :meth:`close`, also after a partial setup).

    Raises
    ------
    RuntimeError
        An ``ip`` command failed (what was made so far is deleted first).
    """

    def __init__(self, prefix: str, hosts: list[str]) -> None:
        if len(prefix) > 8:
            raise ValueError(f"prefix {prefix!r}: at most 8 characters (interface names are short)")
        self.prefix = prefix
        self.switch = f"{prefix}-sw"
        self.address = {host: f"{SUBNET_PREFIX}{index}" for index, host in enumerate(hosts, 1)}
        self.created: list[str] = []
        try:
            self._build()
        except BaseException:
            self.close()
            raise

    def ns(self, host: str) -> str:
        """The namespace name of ``host``."""
        return f"{self.prefix}-{host}"

    def _add_ns(self, name: str) -> None:
        _ip("netns", "add", name)
        self.created.append(name)
        _ip("-n", name, "link", "set", "lo", "up")

    def _build(self) -> None:
        self._add_ns(self.switch)
        _ip("-n", self.switch, "link", "add", "br0", "type", "bridge")
        _ip("-n", self.switch, "link", "set", "br0", "up")
        for index, (host, address) in enumerate(self.address.items()):
            name = self.ns(host)
            self._add_ns(name)
            port = f"p{index}"
            _ip("link", "add", "eth0", "netns", name, "type", "veth", "peer", "name", port, "netns", self.switch)
            _ip("-n", self.switch, "link", "set", port, "master", "br0")
            _ip("-n", self.switch, "link", "set", port, "up")
            _ip("-n", name, "addr", "add", f"{address}/{PREFIX_LEN}", "dev", "eth0")
            _ip("-n", name, "link", "set", "eth0", "up")

    def set_link(self, host: str, *, up: bool, side: str = "host") -> None:
        """Take ``host``'s link down or up again: its own ``eth0`` (``side="host"``), or the switch's
        port to it (``side="switch"``: the network's side, as a switch or cable failing)."""
        if side == "host":
            _ip("-n", self.ns(host), "link", "set", "eth0", "up" if up else "down")
        elif side == "switch":
            _ip("-n", self.switch, "link", "set", f"p{list(self.address).index(host)}", "up" if up else "down")
        else:
            raise ValueError(f"side {side!r}: 'host' or 'switch'")

    def routes(self, host: str) -> list[str]:
        """``ip route`` of ``host``'s namespace, one line per route."""
        return [line.strip() for line in _ip("-n", self.ns(host), "route", "show").stdout.splitlines() if line.strip()]

    def popen(self, host: str, command: list[str], **kwargs) -> subprocess.Popen:
        """Start ``command`` inside ``host``'s namespace (``ip netns exec`` execs it: same PID)."""
        return subprocess.Popen(["ip", "netns", "exec", self.ns(host), *command], **kwargs)

    def run(self, host: str, command: list[str], *, timeout_s: float = 30) -> subprocess.CompletedProcess:
        """Run ``command`` inside ``host``'s namespace and wait for it."""
        return subprocess.run(
            ["ip", "netns", "exec", self.ns(host), *command], capture_output=True, text=True, timeout=timeout_s
        )

    def close(self) -> None:
        """Delete every namespace made (by name; their interfaces go with them). Idempotent."""
        while self.created:
            _ip("netns", "del", self.created.pop(), check=False)


def wait_healthy(net: NamespaceNetwork, url: str, *, host: str = "master", timeout_s: float = 30) -> None:
    """Poll ``url`` from ``host``'s namespace (so the path between the two is checked too)."""
    probe = f"import urllib.request; urllib.request.urlopen({url!r}, timeout=1)"
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if net.run(host, [sys.executable, "-c", probe], timeout_s=10).returncode == 0:
            return
        time.sleep(0.3)
    raise RuntimeError(f"{url} not answering from the {host}'s namespace after {timeout_s:.0f} s")
