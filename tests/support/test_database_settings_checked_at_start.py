"""Database settings the database, its sockets or the pool cannot take stop the process at start.

README, Configuration: "a number out of its range ... stops the process at start with a message
naming the variable". These were read as any whole number at least 0 (or 1, 2), and the process
started. Then no connection could be made at all: PostgreSQL refuses a session setting past its
integer range (idle_in_transaction_session_timeout, tcp_user_timeout), Linux refuses a keepalive
idle time or interval past 32767 s and a probe count past 127 (libpq's setsockopt fails), a connect
or pool timeout past what a wait holds is an OverflowError, and a pool whose minimum is over its
maximum is a ValueError. Every request of the web was the "back in a moment" 503 ("couldn't get a
connection after 5.00 sec"), every worker pass failed, and nothing named the variable.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

QUERY = (
    "from django.db import connection\nwith connection.cursor() as c:\n    c.execute('SELECT 1')\nprint('connected')"
)


def start_and_query(**env: str) -> subprocess.CompletedProcess[str]:
    """Set up Django as every process does, then make one query on a connection from the settings."""
    environ = {**os.environ, "DEBUG": "1", "DJANGO_SETTINGS_MODULE": "support.settings", **env}
    script = f"import django\ndjango.setup()\n{QUERY}"
    return subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, env=environ, capture_output=True, text=True, timeout=120
    )


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("DB_IDLE_IN_TRANSACTION_TIMEOUT_MS", "2147483648"),
        ("DB_TCP_USER_TIMEOUT_MS", "2147483648"),
        ("DB_KEEPALIVES_IDLE", "32768"),
        ("DB_KEEPALIVES_INTERVAL", "32768"),
        ("DB_KEEPALIVES_COUNT", "128"),
        ("DB_CONNECT_TIMEOUT", "99999999999999999999"),
        ("DB_POOL_TIMEOUT", "99999999999"),
        ("DB_POOL_MIN_SIZE", "20"),  # over DB_POOL_MAX_SIZE (10)
    ],
)
def test_a_database_setting_no_connection_can_take_stops_the_process_at_start(name: str, value: str) -> None:
    result = start_and_query(**{name: value})
    output = (result.stdout + result.stderr).strip()
    last = output.splitlines()[-1] if output else ""
    assert "connected" not in result.stdout, f"{name}={value} is a value a connection can take after all"
    assert "ImproperlyConfigured" in output and name in last, (
        f"{name}={value} was accepted at start, and no database connection could then be made: {last!r}; the "
        "README promises a value out of range stops the process at start, naming the variable"
    )


@pytest.mark.parametrize(
    "env",
    [
        {"DB_KEEPALIVES_IDLE": "32767", "DB_KEEPALIVES_INTERVAL": "32767", "DB_KEEPALIVES_COUNT": "127"},
        {"DB_TCP_USER_TIMEOUT_MS": "2147483647", "DB_IDLE_IN_TRANSACTION_TIMEOUT_MS": "2147483647"},
        {"DB_POOL_MIN_SIZE": "3", "DB_POOL_MAX_SIZE": "3", "DB_POOL_TIMEOUT": "86400", "DB_CONNECT_TIMEOUT": "86400"},
    ],
)
def test_the_largest_values_a_connection_takes_still_start_and_connect(env: dict[str, str]) -> None:
    result = start_and_query(**env)
    output = (result.stdout + result.stderr).strip()
    assert result.returncode == 0 and "connected" in result.stdout, (
        f"{env} should start and connect; got {output.splitlines()[-1] if output else ''!r}"
    )
