"""`make run` end to end: embedded servers, every process up, Ctrl-C leaves nothing behind."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import psutil
import pytest

from payments.provider import PaymentProvider

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def get_json(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=5) as response:  # noqa: S310 - loopback only
        return json.loads(response.read())


@pytest.fixture
def run_dir():
    """The launcher's folder, not under pytest's own: the embedded PostgreSQL runs as a user of its own
    (pgserver), who must reach its data, and any pytest session started on the machine meanwhile (the
    suite starts one: tests/support/test_parallel_workers.py) makes /tmp/pytest-of-<user> private
    again; PostgreSQL's shutdown then failed with "could not access directory" and was left running."""
    path = Path(tempfile.mkdtemp(prefix="support-launcher-"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.mark.timeout(300)
def test_make_run_serves_admin_and_health_and_ctrl_c_leaves_no_process(run_dir):
    tmp_path = run_dir
    port, sandbox_port = free_port(), free_port()
    env = {k: v for k, v in os.environ.items() if k not in {"DATABASE_URL", "REDIS_URL"}}
    env.update(
        {
            "EMBEDDED_DIR": str(tmp_path / "var"),
            "PORT": str(port),
            "SANDBOX_PORT": str(sandbox_port),
            "WORKER_CONCURRENCY": "1",
        }
    )
    env.pop("STRIPE_API_BASE", None)
    log = (tmp_path / "run.log").open("w")
    launcher = subprocess.Popen(
        [sys.executable, "-m", "support.launcher"], cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT
    )
    base = f"http://127.0.0.1:{port}"
    try:
        health: dict = {}
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            try:
                health = get_json(f"{base}/healthz")
                if health["worker"]["ok"]:
                    break
            except OSError:
                pass
            assert launcher.poll() is None, (tmp_path / "run.log").read_text()
            time.sleep(1)
        assert health.get("database", {}).get("ok") and health["redis"]["ok"] and health["worker"]["ok"], health
        with urllib.request.urlopen(f"{base}/admin/login/", timeout=5) as response:  # noqa: S310
            assert response.status == 200
            assert b"Support operations" in response.read()

        # The demo orders' payments exist at the payment sandbox, ready to be refunded.
        provider = PaymentProvider(api_base=f"http://127.0.0.1:{sandbox_port}")
        assert provider.get_payment("pi_demo_A-1001").amount_cents == 2900

        tree = psutil.Process(launcher.pid).children(recursive=True)
        embedded_pids = [
            int((tmp_path / "var" / "pgdata" / "postmaster.pid").read_text().split()[0]),
            int((tmp_path / "var" / "redis" / "redis.pid").read_text()),
        ]
        assert len(tree) >= 3  # web, worker (+ its pool), beat
    finally:
        launcher.send_signal(signal.SIGINT)
        code = launcher.wait(60)
        log.close()

    assert code == 0, (tmp_path / "run.log").read_text()
    pids = [p.pid for p in tree] + embedded_pids
    # A loaded host can take its time over PostgreSQL's shutdown checkpoint (fast, then immediate).
    deadline = time.monotonic() + 90
    while [pid for pid in pids if alive(pid)] and time.monotonic() < deadline:
        time.sleep(0.2)
    left = [describe(pid) for pid in pids if alive(pid)]
    assert left == [], f"processes left after Ctrl-C: {left}\n{(tmp_path / 'run.log').read_text()[-3000:]}"


def describe(pid: int) -> str:
    try:
        process = psutil.Process(pid)
        return f"{pid} {process.status()} {' '.join(process.cmdline())[:200]}"
    except psutil.NoSuchProcess:
        return f"{pid} gone"


def alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
