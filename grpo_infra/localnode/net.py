"""Network namespaces on a bridge of this machine: the wiring of every local node.

`ip` (iproute2) does the work; nothing here is kept in memory, so what exists is always read back
from the kernel (`ip netns list`, `ip link show`).
"""

from __future__ import annotations

import contextlib
import ipaddress
from dataclasses import dataclass
from typing import ClassVar

from .run import LocalNodeError, run


@dataclass(frozen=True)
class Link:
    """One node's attachment: its namespace, the veth ends (host side on the bridge, peer side
    renamed to `interface` inside the namespace) and its address."""

    namespace: str
    host_link: str
    peer_link: str
    interface: str
    address: str
    prefix_len: int


@dataclass(frozen=True)
class Machine:
    """One simulated machine of a local cluster: its name, its place on the bridge and its address.
    Each cluster names its namespaces and veth ends with prefixes of its own (a subclass sets them),
    so the Slurm sandbox and the local Kubernetes can run side by side and never tear down each other's."""

    name: str
    index: int
    address: str
    prefix_len: int

    namespace_prefix: ClassVar[str]
    link_prefix: ClassVar[str]

    @classmethod
    def namespace_of(cls, name: str) -> str:
        """The network namespace of this cluster's node `name` (for a node known only by its name)."""
        return f"{cls.namespace_prefix}{name}"

    @property
    def namespace(self) -> str:
        return self.namespace_of(self.name)

    @property
    def host_link(self) -> str:
        return f"{self.link_prefix}{self.index}"

    @property
    def peer_link(self) -> str:
        return f"{self.link_prefix}p{self.index}"

    def link(self, interface: str) -> Link:
        """Its attachment to the bridge, the veth end inside named `interface`."""
        return Link(self.namespace, self.host_link, self.peer_link, interface, self.address, self.prefix_len)


def check_subnet_free(subnet: ipaddress.IPv4Network, hint: str) -> None:
    """Refuse a subnet that overlaps any address or route this machine already has."""
    for line in run(["ip", "-4", "-o", "route", "show", "table", "all"]).splitlines():
        words = line.split()
        if not words:
            continue
        dest = words[0]
        if dest in ("local", "broadcast") and len(words) > 1:
            dest = words[1]
        elif dest in ("default", "unreachable", "blackhole"):
            continue
        with contextlib.suppress(ValueError):
            if ipaddress.IPv4Network(dest, strict=False).overlaps(subnet):
                raise LocalNodeError(f"subnet {subnet} overlaps this machine's route {line.strip()!r}; {hint}")


def add_bridge(name: str, address: str, prefix_len: int) -> None:
    run(["ip", "link", "add", name, "type", "bridge"])
    run(["ip", "addr", "add", f"{address}/{prefix_len}", "dev", name])
    run(["ip", "link", "set", name, "up"])


def attach(bridge: str, link: Link) -> None:
    """A namespace joined to the bridge by a veth pair, its end named `link.interface`, addressed, up."""
    ns = link.namespace
    run(["ip", "netns", "add", ns])
    run(["ip", "link", "add", link.host_link, "type", "veth", "peer", "name", link.peer_link])
    run(["ip", "link", "set", link.host_link, "master", bridge, "up"])
    run(["ip", "link", "set", link.peer_link, "netns", ns])
    run(["ip", "-n", ns, "link", "set", link.peer_link, "name", link.interface])
    run(["ip", "-n", ns, "addr", "add", f"{link.address}/{link.prefix_len}", "dev", link.interface])
    run(["ip", "-n", ns, "link", "set", link.interface, "up"])
    run(["ip", "-n", ns, "link", "set", "lo", "up"])


def namespaces(prefix: str) -> list[str]:
    """The network namespaces whose names start with `prefix` that exist now."""
    out = run(["ip", "netns", "list"], check=False)
    return [line.split()[0] for line in out.splitlines() if line.startswith(prefix)]


def namespace_pids(namespace: str) -> list[int]:
    out = run(["ip", "netns", "pids", namespace], check=False)
    return [int(p) for p in out.split() if p.isdigit()]


def links(prefix: str) -> list[str]:
    """This machine's links whose names start with `prefix` (a veth peer shows as `name@peer`)."""
    found = []
    for line in run(["ip", "-o", "link", "show"], check=False).splitlines():
        parts = line.split(":")
        if len(parts) > 1:
            name = parts[1].strip().split("@")[0]
            if name.startswith(prefix):
                found.append(name)
    return found


def delete_links(prefix: str) -> list[str]:
    """Delete every link named with `prefix` (deleting one veth end removes its peer too)."""
    deleted = []
    for name in links(prefix):
        run(["ip", "link", "del", name], check=False)
        deleted.append(name)
    return deleted
