"""Network namespaces for partition tests (root only, iproute2 only): a *hub* namespace that
routes between *node* namespaces, each linked to it by a veth pair, and the test's own (root)
namespace linked the same way. Links are cut and healed per pair of addresses with policy rules
in the hub (``ip rule ... blackhole``: packets vanish, as in a real partition, no error comes
back). Nothing outside the namespaces changes but one route in the root namespace to the lab's
/16, removed at close. Names carry the process id and the /16 is one no other lab routes, so
that parallel runs do not collide.

Besides the whole cut of a pair: a *one-way* cut (``cut_one_way``: A's packets to B vanish, B's
to A arrive, one policy rule instead of two; a TCP connect from A to B times out while B's
datagrams reach A, and B's connects to A get no answer back) and a *bridge* (``cut_between``:
every pair across two groups is cut, a node in neither group still reaches both halves).
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Sequence

__all__ = ["NetLab", "netns_problem"]


def netns_problem() -> str | None:
    """Why network namespaces cannot be made here (None when they can)."""
    if os.geteuid() != 0:
        return "network namespaces need root (ip netns add)"
    if subprocess.run(["ip", "-V"], capture_output=True).returncode != 0:
        return "iproute2 (ip) is not installed"
    return None


def _ip(*args: str, ns: str | None = None, check: bool = True) -> None:
    cmd = ["ip", "netns", "exec", ns, "ip", *args] if ns else ["ip", *args]
    result = subprocess.run(cmd, capture_output=True, text=True)
    if check and result.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: {result.stderr.strip()}")


def _free_net(first: int) -> int:
    """The first ``10.<net>.0.0/16`` from ``first`` (wrapping within 100-199) that the root
    namespace has no route to: labs of parallel test processes each take their own."""
    for step in range(100):
        net = 100 + (first - 100 + step) % 100
        shown = subprocess.run(["ip", "route", "show", f"10.{net}.0.0/16"], capture_output=True,
                               text=True)
        if shown.returncode == 0 and not shown.stdout.strip():
            return net
    raise RuntimeError("no free 10.<net>.0.0/16 among 10.100-10.199 for a network lab")


class NetLab:
    """Node namespaces ``names`` (each gets address ``10.<net>.<i>.2``) around a hub.

    Attributes:
        addr: node name -> its address; ``root`` is the test process's own address.
        prefix: node name -> the command prefix that runs a program inside it.
    """

    def __init__(self, names: Sequence[str], net: int | None = None) -> None:
        self.tag = f"omq{os.getpid() % 100000}"
        self.net = net if net is not None else _free_net(100 + os.getpid() % 100)
        self.hub = f"{self.tag}hub"
        self.names = list(names)
        self.addr: dict[str, str] = {}
        self.prefix: dict[str, list[str]] = {}
        self._rules: set[tuple[str, str]] = set()
        self._made: list[str] = []
        try:
            self._build()
        except BaseException:
            self.close()
            raise

    def _build(self) -> None:
        _ip("netns", "add", self.hub)
        self._made.append(self.hub)
        _ip("link", "set", "lo", "up", ns=self.hub)
        subprocess.run(["ip", "netns", "exec", self.hub, "sysctl", "-qw",
                        "net.ipv4.ip_forward=1"], check=True, capture_output=True)
        # the root namespace's link (index 0)
        self._link(None, 0)
        _ip("route", "add", f"10.{self.net}.0.0/16", "via", f"10.{self.net}.0.1")
        self.addr["root"] = f"10.{self.net}.0.2"
        for index, name in enumerate(self.names, start=1):
            ns = f"{self.tag}{name}"
            _ip("netns", "add", ns)
            self._made.append(ns)
            _ip("link", "set", "lo", "up", ns=ns)
            self._link(ns, index)
            _ip("route", "add", "default", "via", f"10.{self.net}.{index}.1", ns=ns)
            self.addr[name] = f"10.{self.net}.{index}.2"
            self.prefix[name] = ["ip", "netns", "exec", ns]

    def _link(self, ns: str | None, index: int) -> None:
        outer, inner = f"{self.tag}h{index}", f"{self.tag}n{index}"
        _ip("link", "add", outer, "type", "veth", "peer", "name", inner)
        _ip("link", "set", outer, "netns", self.hub)
        if ns is not None:
            _ip("link", "set", inner, "netns", ns)
        _ip("addr", "add", f"10.{self.net}.{index}.1/24", "dev", outer, ns=self.hub)
        _ip("link", "set", outer, "up", ns=self.hub)
        _ip("addr", "add", f"10.{self.net}.{index}.2/24", "dev", inner, ns=ns)
        _ip("link", "set", inner, "up", ns=ns)

    def cut(self, a: str, b: str) -> None:
        """No packet between nodes ``a`` and ``b`` (either way) from now on."""
        for src, dst in ((a, b), (b, a)):
            if (src, dst) not in self._rules:
                _ip("rule", "add", "from", self.addr[src], "to", self.addr[dst], "blackhole",
                    ns=self.hub)
                self._rules.add((src, dst))

    def cut_one_way(self, src: str, dst: str) -> None:
        """Packets from ``src`` to ``dst`` vanish from now on; those from ``dst`` to ``src``
        still arrive (an asymmetric link: a broken route or firewall on one side)."""
        if (src, dst) not in self._rules:
            _ip("rule", "add", "from", self.addr[src], "to", self.addr[dst], "blackhole",
                ns=self.hub)
            self._rules.add((src, dst))

    def cut_between(self, left: Sequence[str], right: Sequence[str]) -> None:
        """Cut every pair of nodes across the two groups (both ways). With a node in neither
        group this is a *bridge*: both halves still reach that node, not each other."""
        overlap = set(left) & set(right)
        if overlap:
            raise ValueError(f"nodes in both halves: {', '.join(sorted(overlap))}")
        for a in left:
            for b in right:
                self.cut(a, b)

    def cuts(self) -> list[tuple[str, str]]:
        """The directed links cut now, as (from, to) pairs."""
        return sorted(self._rules)

    def heal(self, a: str | None = None, b: str | None = None) -> None:
        """Restore the link between ``a`` and ``b`` (every link without arguments)."""
        for src, dst in list(self._rules):
            if a is None or {src, dst} == {a, b}:
                _ip("rule", "del", "from", self.addr[src], "to", self.addr[dst], "blackhole",
                    ns=self.hub)
                self._rules.discard((src, dst))

    def close(self) -> None:
        _ip("route", "del", f"10.{self.net}.0.0/16", check=False)
        _ip("link", "del", f"{self.tag}n0", check=False)
        for ns in reversed(self._made):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        self._made = []

    def __enter__(self) -> NetLab:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
