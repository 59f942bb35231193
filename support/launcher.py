"""``make run``: the whole product on one machine.

Starts (or reuses) the embedded PostgreSQL and Redis unless DATABASE_URL /
REDIS_URL are set, migrates, seeds the demo data, then runs each part as its
own process: the ASGI web server, a Celery worker, Celery beat and the payment
sandbox. Ctrl-C (or SIGTERM) stops every one of them and the embedded servers
it started; nothing is left behind. Data stays under ``var/`` for the next run.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from support import embedded

BASE_DIR = Path(__file__).resolve().parent.parent
PYTHON = sys.executable


@dataclass
class Part:
    name: str
    argv: list[str]
    proc: subprocess.Popen[bytes] | None = field(default=None, repr=False)


def parts(host: str, port: int) -> list[Part]:
    celery = [PYTHON, "-m", "celery", "-A", "support"]
    result = [
        Part("web", [PYTHON, "-m", "support.server", "-b", host, "-p", str(port), "support.asgi:application"]),
        Part("worker", [*celery, "worker", "-l", "info", "--concurrency", os.environ.get("WORKER_CONCURRENCY", "2"),
                        "-n", "worker@%h"]),
        Part("beat", [*celery, "beat", "-l", "info", "-s", str(embedded.VAR_DIR / "celerybeat-schedule")]),
    ]  # fmt: skip
    if not os.environ.get("STRIPE_API_BASE"):
        port = os.environ.get("SANDBOX_PORT", "12111")
        result.append(Part("payments-sandbox", [PYTHON, "-m", "payments.sandbox", "--port", port]))
    return result


def _stop(running: list[Part]) -> None:
    for part in running:
        if part.proc and part.proc.poll() is None:
            os.killpg(part.proc.pid, signal.SIGTERM)
    deadline = time.monotonic() + 15
    for part in running:
        if part.proc is None:
            continue
        try:
            part.proc.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            pass
        # Whatever is left of the group (the worker's pool children) goes too.
        try:
            os.killpg(part.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        part.proc.wait()


def _seed_sandbox(manage: list[str], env: dict[str, str]) -> None:
    """The demo orders' payments must exist at the provider before anyone asks for a refund."""
    from payments.sandbox_process import SandboxControl

    control = SandboxControl(env["STRIPE_API_BASE"])
    deadline = time.monotonic() + 30
    while not control.healthy():
        if time.monotonic() > deadline:
            raise RuntimeError(f"the payment sandbox at {env['STRIPE_API_BASE']} did not start")
        time.sleep(0.2)
    subprocess.run([*manage, "sandbox_seed_orders"], env=env, cwd=BASE_DIR, check=True)


def _flag(name: str, default: bool) -> bool:
    raw = (os.environ.get(name) or "").strip().lower()
    return default if not raw else raw in {"1", "true", "yes", "on"}


def main() -> int:
    host = os.environ.get("HOST", "127.0.0.1")
    port = int(os.environ.get("PORT", "8000"))
    stop_requested = False

    def request_stop(signum: int, frame: object) -> None:
        nonlocal stop_requested
        stop_requested = True

    signal.signal(signal.SIGINT, request_stop)
    signal.signal(signal.SIGTERM, request_stop)

    with embedded.services() as env_urls:
        env = {**os.environ, **env_urls, "PYTHONUNBUFFERED": "1"}
        manage = [PYTHON, str(BASE_DIR / "manage.py")]
        for step in (["migrate", "--no-input", "-v", "1"], ["seed_demo"]):
            subprocess.run([*manage, *step], env=env, cwd=BASE_DIR, check=True)

        local_sandbox = not os.environ.get("STRIPE_API_BASE")
        if local_sandbox:
            env["STRIPE_API_BASE"] = f"http://127.0.0.1:{os.environ.get('SANDBOX_PORT', '12111')}"
        env.setdefault("OFFLINE_MODEL_TOKEN_DELAY_MS", "30")  # let people see the answer stream in
        running = parts(host, port)
        try:
            for part in running:
                # A session of its own, so Ctrl-C reaches only us and we stop the parts in order.
                part.proc = subprocess.Popen(part.argv, env=env, cwd=BASE_DIR, start_new_session=True)
            if local_sandbox:
                _seed_sandbox(manage, env)
        except BaseException:
            _stop(running)
            raise

        base = f"http://{host}:{port}"
        debug = _flag("DEBUG", False)
        demo = _flag("DEMO_DATA", debug)
        logins = (
            "  Demo mode (DEBUG on): customers alice, bob, carol; staff user 'staff'; password 'support-demo'"
            if demo
            else "  Not demo mode: no demo logins (create one with make manage ARGS=createsuperuser)"
        )
        print(
            "\n".join(
                [
                    "",
                    "Support agent is running (offline model unless AGENT_MODEL is set).",
                    f"  Customer chat:       {base}/",
                    f"  Staff inbox:         {base}/staff/",
                    f"  Approval dashboard:  {base}/staff/approvals/",
                    f"  Admin:               {base}/admin/",
                    f"  Health:              {base}/healthz",
                    logins,
                    "  Ctrl-C stops everything.",
                    "",
                ]
            ),
            flush=True,
        )
        try:
            while not stop_requested:
                for part in running:
                    if part.proc is not None and part.proc.poll() is not None:
                        print(f"{part.name} exited with {part.proc.returncode}; stopping.", file=sys.stderr)
                        stop_requested = True
                time.sleep(0.3)
        finally:
            print("Stopping...", flush=True)
            _stop(running)
    return 0


if __name__ == "__main__":
    sys.exit(main())
