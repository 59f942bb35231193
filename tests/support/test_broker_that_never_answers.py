"""A Redis broker that accepts the connection and never answers costs a doorbell, not the process.

Kombu opens its Redis connections with no socket timeout: a doorbell sent to a broker that hung
(stopped, or a network that swallows the session) waited forever, in the web request that posted a
customer's message, in the worker that scheduled a retry, in the sweeper. The broker's connections
now time out (10 s to answer, 5 s to connect); the doorbell is lost, logged, and rung again by the
sweeper once the broker is back (DESIGN.md, invariant 2).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import silent_server

ROOT = Path(__file__).resolve().parents[2]

RING = """
import time, django
django.setup()
from agents.tasks import ring
began = time.monotonic()
ring(1)
print(f"rang after {time.monotonic() - began:.1f} s")
"""


@pytest.fixture
def silent_port() -> Iterator[int]:
    with silent_server() as (port, _):
        yield port


def test_a_doorbell_to_a_broker_that_never_answers_gives_up_instead_of_waiting_forever(silent_port):
    env = {
        **os.environ,
        "DEBUG": "1",
        "DJANGO_SETTINGS_MODULE": "support.settings",
        "CELERY_BROKER_URL": f"redis://127.0.0.1:{silent_port}/0",
    }
    try:
        done = subprocess.run(
            [sys.executable, "-c", RING], cwd=ROOT, env=env, capture_output=True, text=True, timeout=45
        )
    except subprocess.TimeoutExpired:
        pytest.fail("a doorbell to a broker that never answers was still waiting after 45 s")
    assert done.returncode == 0, done.stderr[-2000:]
    assert "rang after" in done.stdout
    assert "the doorbell could not be sent to the broker" in done.stderr
