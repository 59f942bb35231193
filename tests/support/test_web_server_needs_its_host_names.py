"""The web server with DEBUG off and no ALLOWED_HOSTS stops at start, naming the variable.

Django's own runserver refuses to start so; the ASGI server (daphne, as the image runs) started, and
answered every request, the health check included, with a bare 400 that said nothing of why.
Workers and management commands answer no requests, and start without it.
"""

from __future__ import annotations

import os
import subprocess
import sys

from tests.support.test_configuration import ROOT

PRODUCTION = {"DEBUG": "0", "SECRET_KEY": "Zq8" * 20, "DEMO_DATA": "0"}


def load(module: str, **env: str) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if k not in {"DEBUG", "SECRET_KEY", "ALLOWED_HOSTS"}}
    environ.update({"DJANGO_SETTINGS_MODULE": "support.settings", **PRODUCTION, **env})
    return subprocess.run(
        [sys.executable, "-c", f"import {module}"], cwd=ROOT, env=environ, capture_output=True, text=True, timeout=60
    )


def test_the_web_application_without_allowed_hosts_stops_at_start_naming_the_variable():
    result = load("support.asgi")

    assert result.returncode != 0, "the web application loaded with no host it may answer"
    assert "ALLOWED_HOSTS" in result.stderr.splitlines()[-1], result.stderr[-600:]


def test_the_web_application_with_allowed_hosts_loads():
    result = load("support.asgi", ALLOWED_HOSTS="support.example.com")

    assert result.returncode == 0, result.stderr[-600:]


def test_a_worker_loads_without_allowed_hosts():
    result = load("support.celery")

    assert result.returncode == 0, result.stderr[-600:]
