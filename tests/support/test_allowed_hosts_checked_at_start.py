"""A host name in ALLOWED_HOSTS written as a URL or with a port stops the process at start.

Django compares ALLOWED_HOSTS with the Host header's name without its port, so an entry with a
scheme (``https://support.example.com``), a port (``support.example.com:443``) or a path
(``support.example.com/``) never matches anything: the process started, and every request to the
site was a bare 400 Bad Request (every socket refused too), with nothing naming the variable. The
README promises an address the product trusts that its clients could not read stops it at start.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def manage_check(**env: str) -> subprocess.CompletedProcess[str]:
    environ = {**os.environ, "DEBUG": "1", **env}
    return subprocess.run(
        [sys.executable, "manage.py", "check"], cwd=ROOT, env=environ, capture_output=True, text=True, timeout=120
    )


@pytest.mark.parametrize(
    "value",
    [
        "https://support.example.com",
        "support.example.com:443",
        "support.example.com/",
        "localhost,support.example.com:8000",
        "[::1]:8000",
    ],
)
def test_a_host_name_no_request_can_match_stops_the_process_at_start(value: str) -> None:
    result = manage_check(ALLOWED_HOSTS=value)
    output = (result.stdout + result.stderr).strip()
    last = output.splitlines()[-1] if output else ""
    assert result.returncode != 0 and "ImproperlyConfigured" in last and "ALLOWED_HOSTS" in last, (
        f"ALLOWED_HOSTS={value} was accepted at start (exit {result.returncode}: {last!r}); every request would "
        "be a 400"
    )


def test_host_names_django_matches_still_start() -> None:
    result = manage_check(ALLOWED_HOSTS="support.example.com,.example.org,127.0.0.1,[::1],[2001:db8::1],*")
    assert result.returncode == 0, (result.stdout + result.stderr).strip().splitlines()[-1:]
