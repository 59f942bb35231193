"""Test hosts on one machine: Linux network namespaces joined by veth pairs through a router.

Each host is a network namespace with one link, ``eth0``, to a router namespace that forwards
between them; the test process itself (the root namespace) has one more link to the router, so
it reaches the hosts as a client on the same private network. Every address is in a /24 of
10.0.0.0/8 that no route of the machine uses, picked at random per session, and every name
carries the session's tag, so parallel runs never meet. Nothing listens outside the namespaces.

Failures are made in the router, where a real network fails:

- ``cut(host)``: the host's link drops every packet both ways (a pulled cable, a dead switch
  port): its peers see silence, not a reset, so only timeouts and keepalives notice.
- ``block(a, b, port=...)``: traffic between two hosts (to or from one TCP port) is dropped both
  ways, the rest flows: a partition between the workers and the broker only, say.
- ``slow(a, b, port=..., delay_ms=..., loss_percent=...)``: traffic between ``a`` and ``b:port``
  is delayed and loses packets, both ways (``delay.py`` holds each forwarded packet in user
  space, so it works on kernels built without ``netem``).

Drops are policy-routing ``blackhole`` rules in the router (``ip rule``): forwarded packets that
match are discarded without an ICMP error, so neither end is told. Needs root and iproute2.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from support.embedded import pid_alive

PREFIX = "hosts"  # namespaces: hosts-<pid>-<tag>-<host>


class Unavailable(Exception):
    """Network namespaces cannot be made here (not root, no iproute2, no permission)."""


def run(*argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(argv, capture_output=True, text=True)
    if check and result.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed ({result.returncode}): {result.stderr.strip()}")
    return result


def unavailable_reason() -> str:
    """Why test hosts cannot be made on this machine, or "" if they can."""
    if os.geteuid() != 0:
        return "test hosts need root (ip netns add)"
    if shutil.which("ip") is None:
        return "test hosts need iproute2 (ip); .ci/run installs it"
    probe = f"{PREFIX}-{os.getpid()}-probe"
    made = run("ip", "netns", "add", probe, check=False)
    if made.returncode != 0:
        return f"ip netns add is not permitted here: {made.stderr.strip()}"
    try:
        veth = run("ip", "-n", probe, "link", "add", "name", "va", "type", "veth", "peer", "name", "vb", check=False)
        if veth.returncode != 0:
            return f"veth pairs cannot be made here: {veth.stderr.strip()}"
    finally:
        run("ip", "netns", "del", probe, check=False)
    return ""


def remove_leftovers() -> None:
    """Namespaces of earlier sessions whose pytest process is gone (killed before its teardown)."""
    listing = run("ip", "netns", "list", check=False).stdout
    for line in listing.splitlines():
        name = line.split()[0] if line.split() else ""
        match = re.fullmatch(rf"{PREFIX}-(\d+)-\w+-[\w-]+", name)
        if match is None or pid_alive(int(match.group(1))):
            continue
        _kill_namespace_processes(name)
        run("ip", "netns", "del", name, check=False)

    return True


def _kill_namespace_processes(namespace: str) -> None:
    """SIGKILL whatever still runs in ``namespace`` (only processes this harness started live there)."""
    for _ in range(20):
        pids = [int(p) for p in run("ip", "netns", "pids", namespace, check=False).stdout.split()]
        if not pids:
            return
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.1)


def _used_networks() -> list[ipaddress.IPv4Network]:
    used: list[ipaddress.IPv4Network] = []
    for line in run("ip", "-4", "route", "show", "table", "all", check=False).stdout.splitlines():
        word = line.split()[0] if line.split() else ""
        if word in {"default", "broadcast", "local", "unreachable", "blackhole", "prohibit"}:
            word = line.split()[1] if len(line.split()) > 1 else ""
        with contextlib.suppress(ValueError):
            used.append(ipaddress.ip_network(word, strict=False))
    return used


def _free_subnet() -> ipaddress.IPv4Network:
    used = _used_networks()
    for _ in range(200):
        candidate = ipaddress.ip_network(f"10.{random.randint(200, 254)}.{random.randint(0, 255)}.0/24")
        if not any(candidate.overlaps(net) for net in used if net.prefixlen > 0):
            return candidate
    raise Unavailable("no free /24 in 10.200.0.0/13 for the test hosts")


@dataclass
class Host:
    """One test host: a network namespace with one link to the router."""

    name: str
    namespace: str
    address: str  # on eth0
    router_side: str  # the router's address on this host's link
    port: str  # the link's interface name in the router's namespace
    index: int
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def argv(self, *command: str) -> list[str]:
        return ["ip", "netns", "exec", self.namespace, *command]

    def run(self, *command: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return run(*self.argv(*command), check=check)

    def spawn(self, command: list[str], *, env: dict[str, str], log: Path, cwd: Path | None = None) -> HostProcess:
        """Start ``command`` on this host, in a session of its own, logging to ``log``."""
        handle = log.open("ab")
        popen = subprocess.Popen(
            self.argv(*command), env=env, cwd=cwd, stdout=handle, stderr=subprocess.STDOUT, start_new_session=True
        )
        handle.close()
        self.procs.append(popen)
        return HostProcess(host=self, popen=popen, log_path=log, command=command, env=env, cwd=cwd)


@dataclass
class HostProcess:
    host: Host
    popen: subprocess.Popen[bytes]
    log_path: Path
    command: list[str]
    env: dict[str, str]
    cwd: Path | None

    @property
    def name(self) -> str:
        return f"{self.host.name}:{Path(self.command[0]).name}"

    def alive(self) -> bool:
        return self.popen.poll() is None

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def signal(self, signum: int) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.popen.pid, signum)

    def kill(self) -> None:
        """SIGKILL to its process group, and wait for it (a worker cut off mid-call may not stop on SIGTERM)."""
        self.signal(signal.SIGKILL)
        self.popen.wait()

    def stop(self, timeout: float = 10) -> None:
        if self.alive():
            self.signal(signal.SIGCONT)
            self.signal(signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.popen.wait(timeout)
        self.signal(signal.SIGKILL)
        self.popen.wait()

    def restart(self) -> HostProcess:
        self.stop()
        return self.host.spawn(self.command, env=self.env, log=self.log_path, cwd=self.cwd)


class Network:
    """A router namespace and the hosts linked to it; ``close()`` removes every trace."""

    def __init__(self) -> None:
        self.tag = f"{random.getrandbits(24):06x}"
        self.base = f"{PREFIX}-{os.getpid()}-{self.tag}"
        self.router = f"{self.base}-router"
        self.subnet = _free_subnet()
        self.hosts: dict[str, Host] = {}
        self.root_link = f"h{self.tag}"  # in the root namespace: at most 15 characters
        self._rules: dict[tuple[str, ...], list[int]] = {}
        self._priority = 1000
        self._delayers: list[subprocess.Popen[bytes]] = []
        self._closed = False
        try:
            self._make_router()
        except BaseException:
            self.close()
            raise

    # --- building ------------------------------------------------------------------------------

    def _address(self, block: int, last: int) -> str:
        return str(self.subnet.network_address + 4 * block + last)

    def _make_router(self) -> None:
        run("ip", "netns", "add", self.router)
        run("ip", "-n", self.router, "link", "set", "lo", "up")
        for key, value in {"net.ipv4.ip_forward": "1", "net.ipv4.conf.all.rp_filter": "0"}.items():
            run("ip", "netns", "exec", self.router, "sysctl", "-qw", f"{key}={value}")
        # The test process's own link (block 0): the root namespace reaches the hosts through it.
        run("ip", "link", "add", "name", self.root_link, "type", "veth", "peer", "name", "root", "netns", self.router)
        run("ip", "addr", "add", f"{self._address(0, 2)}/30", "dev", self.root_link)
        run("ip", "link", "set", self.root_link, "up")
        run("ip", "-n", self.router, "addr", "add", f"{self._address(0, 1)}/30", "dev", "root")
        run("ip", "-n", self.router, "link", "set", "root", "up")
        run("ip", "route", "add", str(self.subnet), "via", self._address(0, 1), "dev", self.root_link)
        self.client_address = self._address(0, 2)

    def add_host(self, name: str) -> Host:
        index = len(self.hosts) + 1
        if index >= 64:
            raise ValueError("at most 63 hosts on one /24")
        namespace = f"{self.base}-{name}"
        port = f"p{index}"
        host = Host(name, namespace, self._address(index, 2), self._address(index, 1), port, index)
        run("ip", "netns", "add", namespace)
        self.hosts[name] = host
        run("ip", "-n", namespace, "link", "set", "lo", "up")
        run(
            "ip",
            "-n",
            namespace,
            "link",
            "add",
            "name",
            "eth0",
            "type",
            "veth",
            "peer",
            "name",
            port,
            "netns",
            self.router,
        )
        run("ip", "-n", namespace, "addr", "add", f"{host.address}/30", "dev", "eth0")
        run("ip", "-n", namespace, "link", "set", "eth0", "up")
        run("ip", "-n", namespace, "route", "add", "default", "via", host.router_side)
        run("ip", "-n", self.router, "addr", "add", f"{host.router_side}/30", "dev", port)
        run("ip", "-n", self.router, "link", "set", port, "up")
        return host

    # --- failures ------------------------------------------------------------------------------

    def _add_rules(
        self, key: tuple[str, ...], selectors: list[list[str]], action: tuple[str, ...] | list[str] = ("blackhole",)
    ) -> None:
        if key in self._rules:
            return
        priorities = []
        for selector in selectors:
            self._priority += 1
            run("ip", "-n", self.router, "rule", "add", *selector, *action, "priority", str(self._priority))
            priorities.append(self._priority)
        self._rules[key] = priorities

    def _remove_rules(self, key: tuple[str, ...]) -> None:
        for priority in self._rules.pop(key, []):
            run("ip", "-n", self.router, "rule", "del", "priority", str(priority), check=False)

    def cut(self, host: Host) -> None:
        """Drop everything to and from ``host`` (no reset, no ICMP): a partition."""
        self._add_rules(("cut", host.name), [["from", host.address], ["to", host.address]])

    def heal(self, host: Host) -> None:
        self._remove_rules(("cut", host.name))

    def block(self, a: Host, b: Host, *, port: int | None = None) -> None:
        """Drop traffic between ``a`` and ``b`` both ways; with ``port``, only to and from that TCP
        port on ``b`` (``a``'s connections to ``b:port``)."""
        if port is None:
            selectors = [["from", a.address, "to", b.address], ["from", b.address, "to", a.address]]
        else:
            p = str(port)
            selectors = [
                ["from", a.address, "to", b.address, "ipproto", "tcp", "dport", p],
                ["from", b.address, "to", a.address, "ipproto", "tcp", "sport", p],
            ]
        self._add_rules(("block", a.name, b.name, str(port)), selectors)

    def unblock(self, a: Host, b: Host, *, port: int | None = None) -> None:
        self._remove_rules(("block", a.name, b.name, str(port)))

    def slow(self, a: Host, b: Host, *, port: int, delay_ms: float, loss_percent: float) -> None:
        """Delay every packet between ``a`` and ``b:port`` by ``delay_ms`` each way (a round trip
        takes twice that longer) and drop ``loss_percent`` of them each way, until ``heal_all``."""
        n = len(self._delayers)
        tun_in, tun_out, table = f"slow{n}i", f"slow{n}o", str(100 + n)
        delayer = subprocess.Popen(
            ["ip", "netns", "exec", self.router, sys.executable, "-m", "tests.hosts.delay",
             "--delay-ms", str(delay_ms), "--loss-percent", str(loss_percent), "--tun-in", tun_in,
             "--tun-out", tun_out],
            cwd=Path(__file__).resolve().parents[2], stdout=subprocess.PIPE, start_new_session=True,
        )  # fmt: skip
        self._delayers.append(delayer)
        assert delayer.stdout is not None
        if delayer.stdout.readline().strip() != b"ready":
            raise RuntimeError("the slow-link delayer did not start")
        for device in (tun_in, tun_out):
            run("ip", "netns", "exec", self.router, "sysctl", "-qw", f"net.ipv4.conf.{device}.rp_filter=0")
        run("ip", "-n", self.router, "route", "add", "default", "dev", tun_in, "table", table)
        p = str(port)
        self._add_rules(("slow-out", tun_out), [["iif", tun_out, "lookup", "main"]], action=[])
        self._add_rules(
            ("slow", a.name, b.name, p),
            [
                ["from", a.address, "to", b.address, "ipproto", "tcp", "dport", p, "lookup", table],
                ["from", b.address, "to", a.address, "ipproto", "tcp", "sport", p, "lookup", table],
            ],
            action=[],
        )

    def heal_all(self) -> None:
        for key in list(self._rules):
            self._remove_rules(key)
        for delayer in self._delayers:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(delayer.pid, signal.SIGKILL)
            delayer.wait()
            if delayer.stdout is not None:
                delayer.stdout.close()
        for n in range(len(self._delayers)):
            run("ip", "-n", self.router, "route", "flush", "table", str(100 + n), check=False)
        self._delayers.clear()

    # --- teardown ------------------------------------------------------------------------------

    def close(self) -> None:
        """Stop every process on the hosts, delete every namespace and link. Safe to call twice."""
        if self._closed:
            return
        self._closed = True
        self.heal_all()
        for host in self.hosts.values():
            for popen in host.procs:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(popen.pid, signal.SIGKILL)
        for namespace in [h.namespace for h in self.hosts.values()] + [self.router]:
            _kill_namespace_processes(namespace)
            run("ip", "netns", "del", namespace, check=False)
        for host in self.hosts.values():
            for popen in host.procs:
                with contextlib.suppress(Exception):
                    popen.wait(5)
        # Deleting the router took the root link's peer, and with it the link and its route.
        run("ip", "link", "del", self.root_link, check=False)
