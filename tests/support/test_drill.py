"""``make drill`` passes on the product as it is, and fails when the money path is broken on purpose."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.conf import settings

ROOT = Path(__file__).resolve().parents[2]
# One at a time: a drill refuses to start while another runs on the same server (the first test holds its mark).
pytestmark = [pytest.mark.workers, pytest.mark.timeout(400), pytest.mark.xdist_group("drill")]


def drill(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "DATABASE_URL": settings.DATABASE_URL, "REDIS_URL": settings.REDIS_URL}
    for name in ("DJANGO_SETTINGS_MODULE", "AGENT_FAULT_POINTS", "AGENT_FAULT_ONCE_DIR"):
        env.pop(name, None)
    argv = [sys.executable, "-m", "drill", "--customers", "3", "--kills", "2", "--timeout", "150", *args]
    return subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=380)


def test_a_second_drill_on_the_same_server_refuses_to_run():
    """Two drills would share the scratch database: the second would drop it under the first."""
    import psycopg

    from bench.overhead import Server
    from drill.__main__ import RUNNING_MARK

    server = Server.from_django(settings.DATABASES["default"])  # any database of the server
    with psycopg.connect(server.conninfo(server.admin_db), autocommit=True, application_name=RUNNING_MARK):
        second = drill("--seed", "1")
    assert second.returncode == 2, second.stdout[-2000:] + second.stderr[-2000:]
    assert "another drill is running on this server" in second.stderr


def test_the_drill_passes_on_the_product_and_fails_when_refunds_lose_their_key():
    passed = drill("--seed", "11")
    assert passed.returncode == 0, passed.stdout[-4000:] + passed.stderr[-4000:]
    assert "every invariant holds" in passed.stdout
    for invariant in ("no refund without its approval", "no request refunded twice", "gapless timeline"):
        assert invariant in passed.stdout
    assert "fault points fired: after_call_started" in passed.stdout or "fault points fired: after" in passed.stdout

    broken = drill("--seed", "11", "--break", "skip_idempotency_key")
    assert broken.returncode == 1, broken.stdout[-4000:] + broken.stderr[-4000:]
    assert "violation(s)" in broken.stdout
    assert "is not in the ledger" in broken.stdout or "refunded 2 times" in broken.stdout
