"""Start the payment sandbox as a subprocess, wait until it answers, drive it, stop it.

Used by the tests and by anything that needs a sandbox of its own::

    with SandboxProcess(database_url=url) as sandbox:
        sandbox.seed_payment("pi_demo_A-1001", 2900, "usd")
        provider = PaymentProvider(api_base=sandbox.base_url)

``SandboxControl`` drives a sandbox that is already running (e.g. the one
``make run`` starts at ``http://127.0.0.1:12111``) through its control endpoints.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from types import TracebackType
from typing import IO, Any

BASE_DIR = Path(__file__).resolve().parent.parent

# Loopback only: ignore HTTP(S)_PROXY from the environment.
_opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


class SandboxControl:
    """A client for the sandbox's ``/_sandbox/`` control endpoints."""

    def __init__(self, base_url: str, *, timeout: float = 15.0) -> None:
        self.base_url = base_url.rstrip("/")
        self.timeout = timeout

    def _call(self, method: str, path: str, payload: dict[str, Any] | None = None) -> Any:
        data = json.dumps(payload).encode() if payload is not None else None
        request = urllib.request.Request(self.base_url + path, data=data, method=method)
        if data is not None:
            request.add_header("Content-Type", "application/json")
        try:
            with _opener.open(request, timeout=self.timeout) as response:
                return json.loads(response.read())
        except urllib.error.HTTPError as exc:
            detail = exc.read().decode(errors="replace")
            raise RuntimeError(f"sandbox {method} {path} answered {exc.code}: {detail}") from None

    def healthy(self) -> bool:
        try:
            return bool(self._call("GET", "/_sandbox/health").get("ok"))
        except (OSError, RuntimeError, ValueError):
            return False

    def reset(self) -> None:
        """Delete every payment, refund, idempotency record and queued fault."""
        self._call("POST", "/_sandbox/reset", {})

    def seed_payment(
        self, payment_id: str, amount_cents: int, currency: str = "usd", metadata: dict[str, str] | None = None
    ) -> dict[str, Any]:
        """A succeeded payment with a fixed id (e.g. an Order's payment_reference); idempotent."""
        payload: dict[str, Any] = {"id": payment_id, "amount": amount_cents, "currency": currency}
        if metadata:
            payload["metadata"] = metadata
        return self._call("POST", "/_sandbox/payment_intents", payload)

    def refunds(self) -> list[dict[str, Any]]:
        """Every refund the sandbox holds, oldest first, as Stripe refund objects."""
        return self._call("GET", "/_sandbox/refunds")["data"]

    def idempotency_keys(self) -> list[dict[str, Any]]:
        return self._call("GET", "/_sandbox/idempotency_keys")["data"]

    def expire_idempotency_keys(self, *, older_than_seconds: int = 24 * 60 * 60) -> int:
        """Forget the finished idempotency keys at least this old, as Stripe does after 24 hours."""
        payload = {"older_than_seconds": older_than_seconds}
        return int(self._call("POST", "/_sandbox/idempotency_keys/expire", payload)["expired"])

    def fault(self, mode: str, *, method: str = "POST", path: str = "/v1/refunds", count: int = 1) -> None:
        """Queue a fault for the next ``count`` matching requests.

        Modes: ``latency:<ms>``, ``error_before_commit``, ``error_after_commit``,
        ``drop_after_commit``, ``refund_status:<pending|requires_action|failed|canceled>``.
        A path ending in ``*`` matches by prefix.
        """
        self._call("POST", "/_sandbox/faults", {"mode": mode, "method": method, "path": path, "count": count})

    def settle_refund(self, refund_id: str, status: str) -> dict[str, Any]:
        """Settle a pending refund (``succeeded``, ``failed`` or ``canceled``), as the bank would."""
        return self._call("POST", f"/_sandbox/refunds/{refund_id}/settle", {"status": status})

    def faults(self) -> list[dict[str, Any]]:
        return self._call("GET", "/_sandbox/faults")["faults"]

    def clear_faults(self) -> None:
        self._call("DELETE", "/_sandbox/faults")


class SandboxProcess(SandboxControl):
    """``python -m payments.sandbox`` as a child process on a free (or given) port."""

    def __init__(
        self,
        *,
        database_url: str,
        port: int | None = None,
        host: str = "127.0.0.1",
        seeds: tuple[str, ...] = (),
        log_path: Path | None = None,
    ) -> None:
        self.host = host
        self.port = port or free_port(host)
        super().__init__(f"http://{host}:{self.port}")
        self.database_url = database_url
        self.seeds = seeds
        self.log_path = log_path
        self.proc: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    def start(self, timeout: float = 20.0) -> SandboxProcess:
        """Start the process and return once it answers; raise with its log if it does not."""
        if self.proc is not None and self.proc.poll() is None:
            raise RuntimeError(f"the sandbox is already running (pid {self.proc.pid})")
        argv = [sys.executable, "-m", "payments.sandbox", "--host", self.host, "--port", str(self.port)]
        for seed in self.seeds:
            argv += ["--seed", seed]
        # The URL goes through the environment, not argv, so a password never shows in `ps`.
        env = {**os.environ, "SANDBOX_DATABASE_URL": self.database_url, "PYTHONUNBUFFERED": "1"}
        if self.log_path is not None:
            self._log = self.log_path.open("ab")
        self.proc = subprocess.Popen(
            argv,
            cwd=BASE_DIR,
            env=env,
            stdout=self._log if self._log else subprocess.DEVNULL,
            stderr=subprocess.STDOUT if self._log else None,
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the sandbox exited with {self.proc.returncode} on start{self._log_tail()}")
            if self.healthy():
                return self
            time.sleep(0.05)
        self.kill()
        raise RuntimeError(f"the sandbox did not answer within {timeout:.0f}s{self._log_tail()}")

    def stop(self, timeout: float = 10.0) -> int | None:
        """SIGTERM, then SIGKILL if it is still running after ``timeout``; return the exit code."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self._finish()

    def kill(self) -> None:
        """SIGKILL: a crash, with no chance to finish requests in progress."""
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        self._finish()

    def restart(self, *, crash: bool = True, timeout: float = 20.0) -> SandboxProcess:
        """Kill (or stop) the process and start a new one on the same port and database."""
        if crash:
            self.kill()
        else:
            self.stop()
        return self.start(timeout)

    def _finish(self) -> int | None:
        code = self.proc.returncode if self.proc else None
        if self._log is not None:
            self._log.close()
            self._log = None
        return code

    def _log_tail(self) -> str:
        if self.log_path is None or not self.log_path.exists():
            return ""
        return "\n--- sandbox log ---\n" + self.log_path.read_text(errors="replace")[-4000:]

    def __enter__(self) -> SandboxProcess:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
