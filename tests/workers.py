"""Real Celery worker and beat processes for tests that crash, stop or race them."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import quote

import redis
from django.conf import settings
from django.db import connection

ROOT = Path(__file__).resolve().parents[1]


def test_database_url() -> str:
    """The URL of the database pytest-django created, for processes we start."""
    s = connection.settings_dict
    host = s.get("HOST") or s.get("OPTIONS", {}).get("host") or ""
    auth = quote(s.get("USER") or "", safe="")
    if s.get("PASSWORD"):
        auth += ":" + quote(s["PASSWORD"], safe="")
    port = f":{s['PORT']}" if s.get("PORT") else ""
    return f"postgres://{auth}@{quote(host, safe='')}{port}/{s['NAME']}"


def purge_broker() -> None:
    """Drop every queued and unacknowledged doorbell, as a broker flush would."""
    if getattr(settings, "BROKER_IS_AMQP", False):
        from support.celery import app

        app.control.purge()  # RabbitMQ requeues what dead consumers held; purging drops it
        return
    client = redis.Redis.from_url(settings.REDIS_URL)
    for key in client.scan_iter("*"):
        name = key.decode()
        if name in {"celery", "unacked", "unacked_index", "unacked_mutex"} or name.startswith("_kombu"):
            client.delete(key)


def purge_stream_buffers() -> None:
    """Drop the streamed-answer buffers (tickets.realtime): ticket and step ids restart with each test database."""
    client = redis.Redis.from_url(settings.REDIS_URL)
    prefix = getattr(settings, "CHANNELS_PREFIX", "asgi")
    for key in client.scan_iter(f"{prefix}:stream:*"):
        client.delete(key)


def purge_rounds_sent_lately() -> None:
    """Forget which of beat's rounds were sent lately (``support.celery.RoundsWhileBeatIsDown``): a round an
    earlier test's beat or workers sent keeps its key for three of that test's intervals, and a worker of
    this test would take it for beat's and send none of its kind meanwhile."""
    from support.celery import _rounds_client

    client, prefix = _rounds_client()
    for key in client.scan_iter(f"{prefix}:rounds-sent-lately:*"):
        client.delete(key)


class Proc:
    def __init__(self, name: str, argv: list[str], env: dict[str, str], log_dir: Path) -> None:
        self.name = name
        self.log_path = log_dir / f"{name}.log"
        self._log = self.log_path.open("w")
        self.popen = subprocess.Popen(
            argv, cwd=ROOT, env=env, stdout=self._log, stderr=subprocess.STDOUT, start_new_session=True
        )

    @property
    def pid(self) -> int:
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen.poll() is None

    def log(self) -> str:
        if not self._log.closed:  # a process stopped or killed has had its log closed, flushed
            self._log.flush()
        return self.log_path.read_text(errors="replace")

    def signal(self, signum: int) -> None:
        try:
            os.killpg(self.popen.pid, signum)
        except ProcessLookupError:
            pass

    def wait_dead(self, timeout: float) -> int:
        return self.popen.wait(timeout)

    def kill(self) -> None:
        """SIGKILL to its process group, and wait for it: the end of a test, whose processes have
        nothing left to finish (the tables are emptied and the broker purged after them); a warm
        shutdown, then the interpreter's, takes a worker or web server seconds on a busy host."""
        self.signal(signal.SIGKILL)
        self.popen.wait()
        self._log.close()

    def stop(self) -> None:
        if self.alive():
            self.signal(signal.SIGCONT)
            self.signal(signal.SIGTERM)
            try:
                self.popen.wait(10)
            except subprocess.TimeoutExpired:
                pass
        self.signal(signal.SIGKILL)
        self.popen.wait()
        self._log.close()


class Cluster:
    """Starts worker and beat processes against the test database; stops them all at the end."""

    def __init__(self, tmp_path: Path) -> None:
        self.tmp_path = tmp_path
        self.procs: list[Proc] = []
        self.fault_dir = tmp_path / "faults"
        self.fault_dir.mkdir(exist_ok=True)
        self.mail_dir = tmp_path / "mail"
        self.mail_dir.mkdir(exist_ok=True)
        self._count = 0

    def env(self, **extra: str) -> dict[str, str]:
        env = dict(os.environ)
        for key in ("AGENT_FAULT_POINTS", "AGENT_FAULT_ONCE_DIR"):
            env.pop(key, None)
        env.update(
            {
                "DATABASE_URL": test_database_url(),
                "REDIS_URL": settings.REDIS_URL,
                "AGENT_LEASE_SECONDS": "2",
                "AGENT_SWEEP_SECONDS": "1",
                "EMAIL_BACKEND": "django.core.mail.backends.filebased.EmailBackend",
                "EMAIL_FILE_PATH": str(self.mail_dir),
                "STRIPE_API_BASE": settings.STRIPE_API_BASE,
                "EMBEDDED_DIR": str(self.tmp_path / "var"),
                "PYTHONUNBUFFERED": "1",
                # Off unless a test asks for it (``cluster.worker(REFUND_CUSTOMER_CONFIRMATION="1")``):
                # the tests of the customer's confirmation are tests/agents/test_confirmation.py.
                "REFUND_CUSTOMER_CONFIRMATION": "0",
            }
        )
        env.update(extra)
        return env

    def worker(self, *, faults: str = "", pool: str = "solo", **extra: str) -> Proc:
        self._count += 1
        name = f"worker{self._count}"
        env = self.env(**extra)
        if faults:
            env.update({"AGENT_FAULT_POINTS": faults, "AGENT_FAULT_ONCE_DIR": str(self.fault_dir)})
        argv = [sys.executable, "-m", "celery", "-A", "support", "worker", "-l", "info", "-n", f"{name}@%h",
                f"--pool={pool}", "--without-gossip", "--without-mingle", "--without-heartbeat"]  # fmt: skip
        if pool == "prefork":
            argv += ["--concurrency", "1"]
        proc = Proc(name, argv, env, self.tmp_path)
        self.procs.append(proc)
        return proc

    def beat(self, **extra: str) -> Proc:
        argv = [sys.executable, "-m", "celery", "-A", "support", "beat", "-l", "info",
                "-s", str(self.tmp_path / "celerybeat-schedule")]  # fmt: skip
        proc = Proc("beat", argv, self.env(**extra), self.tmp_path)
        self.procs.append(proc)
        return proc

    def web(self, port: int, **extra: str) -> Proc:
        """The ASGI server (daphne) on 127.0.0.1:``port``, as in production: DEBUG off."""
        env = self.env(
            **{
                "DEBUG": "0",
                "SECRET_KEY": "test-only-secret-key-of-the-web-process",
                "ALLOWED_HOSTS": "127.0.0.1,localhost",
                # Plain HTTP on loopback: no redirect to HTTPS, cookies that travel over HTTP.
                "SECURE_SSL_REDIRECT": "0",
                "SESSION_COOKIE_SECURE": "0",
                "CSRF_COOKIE_SECURE": "0",
                "SECURE_HSTS_SECONDS": "0",
                **extra,
            }
        )
        # The test process may allow sync ORM calls beside Playwright's loop; the server must not.
        env.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)
        argv = [sys.executable, "-m", "support.server", "-b", "127.0.0.1", "-p", str(port), "support.asgi:application"]
        proc = Proc(f"web{port}", argv, env, self.tmp_path)
        self.procs.append(proc)
        return proc

    def stop_all(self) -> None:
        """Every process killed (``Proc.kill``); a test that means to stop one gracefully calls its ``stop()``."""
        for proc in self.procs:
            proc.kill()

    def logs(self) -> str:
        return "\n".join(f"----- {p.name}\n{p.log()[-4000:]}" for p in self.procs)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_for_http(url: str, *, timeout: float, proc: Proc | None = None) -> None:
    """Until ``url`` answers at all (any HTTP status); fails early if ``proc`` died."""
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # loopback: never through a proxy
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and not proc.alive():
            raise AssertionError(f"{proc.name} exited with {proc.popen.returncode}:\n{proc.log()[-4000:]}")
        try:
            with opener.open(url, timeout=2):
                return
        except urllib.error.HTTPError:
            return
        except OSError:
            time.sleep(0.1)
    detail = f"\n{proc.log()[-4000:]}" if proc else ""
    raise AssertionError(f"timed out after {timeout}s waiting for {url}{detail}")


def wait_until(
    predicate: Callable[[], Any], *, timeout: float, what: str, cluster: Cluster | None = None, interval: float = 0.1
) -> Any:
    """Poll until ``predicate`` returns something true, and return it."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    detail = f"\n{cluster.logs()}" if cluster else ""
    raise AssertionError(f"timed out after {timeout}s waiting for {what}{detail}")


class TcpProxy:
    """A TCP forwarder on loopback that a test can cut and restore, as a database that goes away.

    ``down()`` closes the listening socket and every forwarded connection; ``up()`` listens
    again on the same port. A connection whose server says nothing for ``idle_timeout`` seconds
    is closed (None: never, as a broker's consumer waits on a quiet queue).
    """

    def __init__(self, target_host: str, target_port: int, *, idle_timeout: float | None = 5) -> None:
        import threading

        self.target = (target_host, target_port)
        self.idle_timeout = idle_timeout
        self.port = free_port()
        self._threading = threading
        self._conns: list[socket.socket] = []
        self._listener: socket.socket | None = None
        self._lock = threading.Lock()

    def up(self) -> TcpProxy:
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(64)
        self._listener = listener
        self._threading.Thread(target=self._accept, args=(listener,), daemon=True).start()
        return self

    def down(self) -> None:
        with self._lock:
            listener, self._listener = self._listener, None
            conns, self._conns = self._conns, []
        if listener is not None:
            try:
                listener.shutdown(socket.SHUT_RDWR)  # wakes the accepting thread; close alone does not
            except OSError:
                pass
            listener.close()
        for conn in conns:
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            conn.close()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            try:
                host, port = self.target
                if host.startswith("/"):  # a socket directory, as the embedded PostgreSQL has
                    upstream = socket.socket(socket.AF_UNIX)
                    upstream.connect(f"{host}/.s.PGSQL.{port}")
                else:
                    upstream = socket.create_connection(self.target, timeout=5)
                    upstream.settimeout(self.idle_timeout)
            except OSError:
                client.close()
                continue
            with self._lock:
                self._conns += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                self._threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    @staticmethod
    def _pipe(source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass
        finally:
            for sock in (source, sink):
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
