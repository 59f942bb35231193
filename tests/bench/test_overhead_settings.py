"""The turn-overhead benchmark measures the product as deployed, not as ``make test`` runs it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

PROBE = """
from bench.overhead import production_settings
production_settings()
from django.conf import settings
print(settings.DEBUG)
"""


def test_the_overhead_benchmark_runs_with_debug_off_when_the_shell_says_debug():
    # `make bench-overhead` inherits the Makefile's DEBUG=1; with it, Django wraps every statement
    # in its logging cursor, which the turn's figure would carry and no production worker pays.
    env = {**os.environ, "DEBUG": "1", "DJANGO_SETTINGS_MODULE": "support.settings"}
    env.pop("SECRET_KEY", None)
    done = subprocess.run(
        [sys.executable, "-c", PROBE], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"
