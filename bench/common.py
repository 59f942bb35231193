"""What the parts of ``python -m bench`` share: figures, processes, percentiles, the site over HTTP.

The Postgres admin connection, percentiles, the table layout, the git revision and the
package versions come from ``bench.overhead``; this module only adds what the other
parts need beside them.
"""

from __future__ import annotations

import os
import platform
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.overhead import BenchError, percentile

ROOT = Path(__file__).resolve().parent.parent


RESULTS_DIR = ROOT / "bench-results"
# Each demo customer asks about an order of their own (tickets.demo.DEMO_CUSTOMERS).
DEMO_QUESTIONS = {
    "alice": "Where is my order A-1001?",
    "bob": "Where is my order B-2001?",
    "carol": "Where is my order C-3001?",
}


# --- figures --------------------------------------------------------------------------------


@dataclass
class Row:
    """One line of the printed table; ``key`` names it in the JSON."""

    key: str
    figure: str
    value: float | None
    unit: str
    notes: str = ""
    digits: int = 1


@dataclass
class PartResult:
    name: str
    rows: list[Row] = field(default_factory=list)
    raw: dict[str, Any] = field(default_factory=dict)
    error: str | None = None
    seconds: float = 0.0

    def add(self, key: str, figure: str, value: float | None, unit: str, notes: str = "", digits: int = 1) -> None:
        self.rows.append(Row(key, figure, value, unit, notes, digits))


def latency_summary(values_ms: list[float]) -> dict[str, Any]:
    if not values_ms:
        return {"n": 0}
    return {
        "n": len(values_ms),
        "p50_ms": percentile(values_ms, 0.50),
        "p99_ms": percentile(values_ms, 0.99),
        "mean_ms": sum(values_ms) / len(values_ms),
        "min_ms": min(values_ms),
        "max_ms": max(values_ms),
    }


# --- the machine ------------------------------------------------------------------------------


def machine_info() -> dict[str, Any]:
    import psutil

    cpu_model = ""
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        match = re.search(r"^model name\s*:\s*(.+)$", cpuinfo.read_text(errors="replace"), re.MULTILINE)
        cpu_model = match.group(1).strip() if match else ""
    return {
        "cores_logical": os.cpu_count(),
        "cores_physical": psutil.cpu_count(logical=False),
        "cpu_model": cpu_model or platform.processor(),
        "memory_bytes": psutil.virtual_memory().total,
        "platform": platform.platform(),
        "python": platform.python_version(),
    }


# --- processes --------------------------------------------------------------------------------


class Proc:
    """A process of the product (web, worker, beat) in a session of its own, logging to a file."""

    def __init__(self, name: str, argv: list[str], env: dict[str, str], log_dir: Path) -> None:
        self.name = name
        self.argv = argv
        self.env = env
        self.log_path = log_dir / f"{name}.log"
        self._log = self.log_path.open("a")
        self.started_at = time.time()
        self.popen = subprocess.Popen(
            argv, cwd=ROOT, env=env, stdout=self._log, stderr=subprocess.STDOUT, start_new_session=True
        )

    @property
    def pid(self) -> int:
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen.poll() is None

    def log(self) -> str:
        self._log.flush()
        return self.log_path.read_text(errors="replace")

    def wait_log(self, pattern: str, *, timeout: float, after: int = 0) -> None:
        """Until ``pattern`` shows in the log (past byte ``after``); fails early if the process died."""
        regex = re.compile(pattern)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if regex.search(self.log()[after:]):
                return
            if not self.alive():
                raise BenchError(f"{self.name} exited with {self.popen.returncode}:\n{self.log()[-3000:]}")
            time.sleep(0.05)
        raise BenchError(f"{self.name}: no {pattern!r} in its log after {timeout}s:\n{self.log()[-3000:]}")

    def processes(self) -> list[Any]:
        """This process and its children (a prefork pool's processes), as psutil objects."""
        import psutil

        try:
            main = psutil.Process(self.pid)
            return [main, *main.children(recursive=True)]
        except psutil.NoSuchProcess:
            return []

    def cpu_seconds(self) -> float:
        """User + system CPU seconds of this process and its children alive now."""
        return cpu_seconds_of(self.processes())

    def rss_bytes(self) -> int:
        import psutil

        total = 0
        for proc in self.processes():
            try:
                total += proc.memory_info().rss
            except psutil.NoSuchProcess:
                pass
        return total

    def stop(self) -> None:
        if self.alive():
            self._signal(signal.SIGTERM)
            try:
                self.popen.wait(15)
            except subprocess.TimeoutExpired:
                pass
        self._signal(signal.SIGKILL)  # whatever is left of its session
        self.popen.wait()
        self._log.close()

    def _signal(self, signum: int) -> None:
        try:
            os.killpg(self.popen.pid, signum)
        except ProcessLookupError:
            pass


def cpu_seconds_of(processes: list[Any]) -> float:
    import psutil

    total = 0.0
    for proc in processes:
        try:
            times = proc.cpu_times()
        except psutil.NoSuchProcess:
            continue
        total += times.user + times.system
    return total


def cpu_by_role(cluster: Cluster) -> dict[str, float]:
    """CPU seconds used so far, by role: the cluster's web, workers and beat, PostgreSQL and Redis
    (their server processes alive now), this benchmark process, and the whole machine (busy time
    of all cores, from /proc/stat). Read twice and subtract: a process that ends between the two
    readings takes its seconds with it, which only the machine's figure still holds."""
    import psutil

    roles: dict[str, float] = {"web": 0.0, "workers": 0.0, "beat": 0.0}
    for proc in cluster.procs:
        role = "workers" if proc.name.startswith("worker") else "web" if proc.name.startswith("web") else "beat"
        roles[role] += proc.cpu_seconds()
    servers: dict[str, list[Any]] = {"postgres": [], "redis": []}
    for proc in psutil.process_iter(["name"]):
        name = proc.info["name"] or ""
        if name.startswith("postgres"):
            servers["postgres"].append(proc)
        elif name.startswith("redis-server"):
            servers["redis"].append(proc)
    roles.update({role: cpu_seconds_of(procs) for role, procs in servers.items()})
    roles["benchmark"] = cpu_seconds_of([psutil.Process()])
    machine = psutil.cpu_times()
    roles["machine"] = sum(machine) - machine.idle - getattr(machine, "iowait", 0.0)
    return roles


class Cluster:
    """Web (daphne), Celery worker and beat processes on the benchmark's scratch database.

    Each is started as in production (``support.launcher``), one process each, with the
    settings of ``bench.suite_settings``: the scratch database and a queue of its own.
    """

    def __init__(self, name: str, log_dir: Path, base_env: dict[str, str], **extra: str) -> None:
        self.name = name
        self.log_dir = log_dir / name
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.env = {**base_env, **extra}
        self.procs: list[Proc] = []
        self._count = 0

    def _start(self, name: str, argv: list[str], **extra: str) -> Proc:
        proc = Proc(name, argv, {**self.env, **extra}, self.log_dir)
        self.procs.append(proc)
        return proc

    def worker(self, name: str | None = None, **extra: str) -> Proc:
        """One worker process: ``--pool=solo``, so a task runs in the worker's own process."""
        if name is None:
            self._count += 1
            name = f"worker{self._count}"
        argv = [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "support",
            "worker",
            "-l",
            "info",
            "-n",
            f"{name}@%h",
            "--pool=solo",
            "--without-gossip",
            "--without-mingle",
            "--without-heartbeat",
        ]
        return self._start(name, argv, **extra)

    def beat(self, **extra: str) -> Proc:
        schedule = self.log_dir / "celerybeat-schedule"
        argv = [sys.executable, "-m", "celery", "-A", "support", "beat", "-l", "info", "-s", str(schedule)]
        return self._start("beat", argv, **extra)

    def web(self, port: int, **extra: str) -> Proc:
        argv = [sys.executable, "-m", "support.server", "-b", "127.0.0.1", "-p", str(port), "support.asgi:application"]
        return self._start(f"web{port}", argv, **extra)

    def restart(self, proc: Proc) -> Proc:
        """A new process with the same command and environment, logging to the same file."""
        proc.stop()
        self.procs.remove(proc)
        fresh = Proc(proc.name, proc.argv, proc.env, self.log_dir)
        self.procs.append(fresh)
        return fresh

    def workers(self) -> list[Proc]:
        return [p for p in self.procs if p.name.startswith("worker")]

    def stop_all(self) -> None:
        for proc in self.procs:
            proc.stop()

    def logs(self, tail: int = 3000) -> str:
        return "\n".join(f"----- {p.name} ({p.log_path})\n{p.log()[-tail:]}" for p in self.procs)


def wait_worker_ready(proc: Proc, *, timeout: float = 60, after: int = 0) -> None:
    proc.wait_log(r"\bready\.", timeout=timeout, after=after)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_until(predicate: Callable[[], Any], *, timeout: float, what: str, interval: float = 0.05) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise BenchError(f"timed out after {timeout:g}s waiting for {what}")


# --- the customer web chat over HTTP --------------------------------------------------------------


class Customer:
    """One demo customer signed in through /accounts/login/, with the session and CSRF cookies."""

    def __init__(self, base_url: str, username: str) -> None:
        import httpx

        self.username = username
        self.base_url = base_url
        self.client = httpx.AsyncClient(base_url=base_url, timeout=30, follow_redirects=False)

    async def login(self) -> None:
        from tickets.demo import DEMO_PASSWORD

        page = await self.client.get("/accounts/login/")
        page.raise_for_status()
        form = {
            "username": self.username,
            "password": DEMO_PASSWORD,
            "next": "/",
            "csrfmiddlewaretoken": self.client.cookies["csrftoken"],
        }
        answer = await self.client.post("/accounts/login/", data=form, headers={"Referer": f"{self.base_url}/"})
        if answer.status_code != 302 or "sessionid" not in self.client.cookies:
            raise BenchError(f"logging in as {self.username} failed: HTTP {answer.status_code}")

    async def open_ticket(self, body: str, *, client_ref: str) -> tuple[int, float]:
        """POST /tickets/new/ as the form does; returns (ticket id, wall time the POST started)."""
        token = self.client.cookies["csrftoken"]
        form = {"csrfmiddlewaretoken": token, "client_ref": client_ref, "subject": "", "body": body}
        started = time.time()
        answer = await self.client.post(
            "/tickets/new/", data=form, headers={"X-CSRFToken": token, "Referer": f"{self.base_url}/tickets/new/"}
        )
        match = re.search(r"/tickets/(\d+)/", answer.headers.get("location", ""))
        if answer.status_code != 302 or match is None:
            raise BenchError(f"opening a ticket as {self.username}: HTTP {answer.status_code} {answer.text[:300]}")
        return int(match.group(1)), started

    async def close(self) -> None:
        await self.client.aclose()


# --- formatting -------------------------------------------------------------------------------------


def fmt_value(value: float | None, digits: int) -> str:
    if value is None:
        return "-"
    if digits == 0 or abs(value) >= 10_000:
        return f"{value:,.0f}"
    return f"{value:,.{digits}f}"


def mib(value: float) -> float:
    return value / (1024 * 1024)


# --- the run --------------------------------------------------------------------------------------


@dataclass
class Context:
    """What every part gets: the arguments, the Postgres server (admin connection), where logs go,
    the environment for the product processes, and the figures of parts run before it."""

    args: Any
    server: Any  # bench.overhead.Server, connected to the database DATABASE_URL names
    log_dir: Path
    child_env: dict[str, str]
    postgres: dict[str, Any]
    results: dict[str, PartResult] = field(default_factory=dict)

    def ceiling(self, clients: int) -> float | None:
        """Commits/s the ceiling part measured with ``clients`` clients (None if it did not run)."""
        part = self.results.get("ceiling")
        if part is None or part.error:
            return None
        return part.raw.get("commits_per_second", {}).get(str(clients))


def wait_http(url: str, *, timeout: float, proc: Proc | None = None) -> None:
    """Until ``url`` answers at all; fails early if ``proc`` died."""
    import httpx

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and not proc.alive():
            raise BenchError(f"{proc.name} exited with {proc.popen.returncode}:\n{proc.log()[-3000:]}")
        try:
            httpx.get(url, timeout=2)
            return
        except httpx.HTTPError:
            time.sleep(0.1)
    raise BenchError(f"timed out after {timeout:g}s waiting for {url}")


def start_stack(
    ctx: Context, name: str, *, workers: int, web: bool = True, beat: bool = True, **env: str
) -> tuple[Cluster, str]:
    """Web (optional), ``workers`` worker processes and beat, started and answering; returns (cluster, base URL)."""
    from bench.suite_settings import WORKER_QUEUE

    redis_purge_queue(WORKER_QUEUE)  # nothing left over from an earlier part
    cluster = Cluster(name, ctx.log_dir, ctx.child_env, **env)
    base_url = ""
    try:
        started = [cluster.worker() for _ in range(workers)]
        if beat:
            cluster.beat()
        if web:
            port = free_port()
            base_url = f"http://127.0.0.1:{port}"
            wait_http(f"{base_url}/accounts/login/", timeout=60, proc=cluster.web(port))
        for proc in started:
            wait_worker_ready(proc)
    except BaseException:
        cluster.stop_all()
        raise
    return cluster, base_url


# --- Redis -----------------------------------------------------------------------------------------


def _redis() -> Any:
    import redis
    from django.conf import settings

    return redis.Redis.from_url(settings.REDIS_URL)


def redis_queue_length(queue: str) -> int:
    return int(_redis().llen(queue))


def redis_purge_queue(queue: str) -> int:
    """Drop what waits in ``queue`` (its priority lists too); returns how many messages there were."""
    client = _redis()
    dropped = 0
    for key in client.scan_iter(match=f"{queue}*"):
        name = key.decode(errors="replace")
        if (name == queue or name.startswith(f"{queue}\x06\x16")) and client.type(key) == b"list":
            dropped += client.llen(key)
            client.delete(key)
    return dropped


def redis_cleanup(queues: list[str], prefix: str) -> dict[str, int]:
    """Delete this run's queues, their unacknowledged messages (a SIGKILLed worker leaves its
    message there), kombu's bindings for them, and the Channels/streaming keys under ``prefix``."""
    import json

    client = _redis()
    out = {"queued": sum(redis_purge_queue(q) for q in queues), "unacked": 0, "keys": 0}
    for field_, value in client.hscan_iter("unacked"):
        try:
            routing_key = json.loads(value)[2]
        except (ValueError, IndexError, TypeError):
            continue
        if routing_key in queues:
            client.hdel("unacked", field_)
            client.zrem("unacked_index", field_)
            out["unacked"] += 1
    # kombu's bindings: _kombu.binding.<queue>, and _kombu.binding_permanent.<queue> in newer versions.
    for pattern in [f"_kombu.binding*.{q}" for q in queues] + [f"{prefix}*"]:
        for key in client.scan_iter(match=pattern):
            client.delete(key)
            out["keys"] += 1
    return out
