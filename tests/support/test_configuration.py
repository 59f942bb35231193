from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def start_django(tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if k not in {"DATABASE_URL", "REDIS_URL", "SECRET_KEY", "DEBUG"}}
    environ.update({"EMBEDDED_DIR": str(tmp_path / "nothing-running"), **env})
    return subprocess.run(
        [sys.executable, "-c", "import django; django.setup()"],
        cwd=ROOT,
        env={**environ, "DJANGO_SETTINGS_MODULE": "support.settings"},
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"DEBUG": "1"}, "DATABASE_URL is not set"),
        (
            {"DATABASE_URL": "mysql://u:p@localhost/db", "REDIS_URL": "redis://x/0", "DEBUG": "1"},
            "must point at PostgreSQL",
        ),
        (
            {"DATABASE_URL": "postgres://u@h/db", "REDIS_URL": "http://nope", "DEBUG": "1"},
            "REDIS_URL must start with redis://",
        ),
        ({"DATABASE_URL": "postgres://u@h/db", "REDIS_URL": "redis://h/0", "DEBUG": "maybe"}, "DEBUG='maybe'"),
        ({"DATABASE_URL": "postgres://u@h/db", "REDIS_URL": "redis://h/0", "DEBUG": "0"}, "SECRET_KEY is not set"),
        # Blank is not set (it was taken as the key).
        *(
            (
                {"DATABASE_URL": "postgres://u@h/db", "REDIS_URL": "redis://h/0", "DEBUG": "0", "SECRET_KEY": blank},
                "SECRET_KEY is not set",
            )
            for blank in ["   ", "\t"]
        ),
        # A header named as on the wire was accepted, and never matched: every request looked like HTTP.
        *(
            (
                {
                    "DATABASE_URL": "postgres://u@h/db",
                    "REDIS_URL": "redis://h/0",
                    "DEBUG": "1",
                    "SECURE_PROXY_SSL_HEADER": header,
                },
                f"SECURE_PROXY_SSL_HEADER={header!r}: name the header as Django",
            )
            for header in ["X-Forwarded-Proto,https", "x_forwarded_proto,https"]
        ),
        (
            {
                "DATABASE_URL": "postgres://u@h/db",
                "REDIS_URL": "redis://h/0",
                "DEBUG": "1",
                "MEDIA_STORAGE_OPTIONS": "{b",
            },
            "MEDIA_STORAGE_OPTIONS is not a JSON object",
        ),
        (
            {
                "DATABASE_URL": "postgres://u@h/db",
                "REDIS_URL": "redis://h/0",
                "DEBUG": "1",
                "MEDIA_STORAGE_OPTIONS": "[]",
            },
            "MEDIA_STORAGE_OPTIONS must be a JSON object",
        ),
        (
            {
                "DATABASE_URL": "postgres://u@h/db",
                "REDIS_URL": "redis://h/0",
                "DEBUG": "1",
                "ATTACHMENT_MAX_BYTES": "10MB",
            },
            "ATTACHMENT_MAX_BYTES='10MB' is not a whole number",
        ),
        *(
            (
                {"DATABASE_URL": "postgres://u@h/db", "REDIS_URL": "redis://h/0", "DEBUG": "1", name: value},
                message,
            )
            for name, value, message in [
                ("CUSTOMER_MESSAGE_RATE", "8 per 10s", "CUSTOMER_MESSAGE_RATE='8 per 10s' is not a rate"),
                ("CUSTOMER_TICKET_RATE", "10/week", "CUSTOMER_TICKET_RATE='10/week' is not a rate"),
                ("PASSWORD_RESET_RATE_PER_EMAIL", "0/h", "PASSWORD_RESET_RATE_PER_EMAIL='0/h' is not a rate"),
                ("PASSWORD_RESET_RATE_PER_IP", "h", "PASSWORD_RESET_RATE_PER_IP='h' is not a rate"),
                ("PAYMENTS_TIMEOUT_SECONDS", "ten", "PAYMENTS_TIMEOUT_SECONDS='ten' is not a number of seconds"),
                ("PAYMENTS_TIMEOUT_SECONDS", "0", "PAYMENTS_TIMEOUT_SECONDS='0' must be a positive number"),
                ("AGENT_TOOL_TIMEOUT_SECONDS", "ten", "AGENT_TOOL_TIMEOUT_SECONDS='ten' is not a number of seconds"),
                ("AGENT_TOOL_TIMEOUT_SECONDS", "0", "AGENT_TOOL_TIMEOUT_SECONDS='0' must be a positive number"),
                # Below a refund's tries at a provider that does not answer (2 x (4 x 10 s + 5 s)): such an
                # outage would be cut short and counted as the ticket's failure instead of waited out.
                ("AGENT_TOOL_TIMEOUT_SECONDS", "30", "AGENT_TOOL_TIMEOUT_SECONDS=30 must be above a refund's tries"),
                ("AGENT_MODEL", "opnai-gpt-4o-mini", "AGENT_MODEL='opnai-gpt-4o-mini' is not 'offline'"),
                ("AGENT_MODEL", "openai:", "AGENT_MODEL=openai: needs a model name"),
            ]
        ),
    ],
)
def test_missing_or_malformed_configuration_fails_at_start_naming_what_to_set(tmp_path, env, message):
    result = start_django(tmp_path, **env)

    assert result.returncode != 0
    assert message in result.stderr


def test_complete_configuration_starts(tmp_path):
    result = start_django(
        tmp_path, DATABASE_URL="postgres://u@h/db", REDIS_URL="redis://h/0", DEBUG="0", SECRET_KEY="s" * 50
    )
    assert result.returncode == 0, result.stderr


def test_database_connections_carry_keepalives_for_both_ends_and_keep_options_from_the_url(monkeypatch):
    from support.settings import database_keepalive_options

    for name in ("DB_KEEPALIVES_IDLE", "DB_KEEPALIVES_INTERVAL", "DB_KEEPALIVES_COUNT", "DB_TCP_USER_TIMEOUT_MS"):
        monkeypatch.delenv(name, raising=False)
    options = database_keepalive_options({"options": "-c statement_timeout=5000"})
    # The client's end (libpq) and the server's end (per-session settings in the startup packet).
    assert (options["keepalives_idle"], options["keepalives_interval"], options["keepalives_count"]) == (5, 2, 3)
    assert options["tcp_user_timeout"] == 10_000 and options["connect_timeout"] == 5
    assert options["options"] == (
        "-c statement_timeout=5000 -c tcp_keepalives_idle=5 -c tcp_keepalives_interval=2 "
        "-c tcp_keepalives_count=3 -c tcp_user_timeout=10000"
    )
    monkeypatch.setenv("DB_KEEPALIVES_IDLE", "0")
    assert database_keepalive_options({}) == {"connect_timeout": 5}  # the operating system's defaults


def test_the_web_lends_database_connections_from_a_pool_and_a_worker_keeps_its_own(monkeypatch):
    from support.celery import keep_worker_connection
    from support.settings import database_pool_options, release_session_locks

    for name in ("DB_POOL", "DB_POOL_MIN_SIZE", "DB_POOL_MAX_SIZE", "DB_POOL_TIMEOUT", "DB_CONNECT_TIMEOUT"):
        monkeypatch.delenv(name, raising=False)
    web = {"CONN_MAX_AGE": 0, "CONN_HEALTH_CHECKS": False, "OPTIONS": {"connect_timeout": 5}}
    database_pool_options(web)
    # Checked before it is lent; a request waits for one as long as it would for a new connection.
    pool = web["OPTIONS"]["pool"]
    assert {k: v for k, v in pool.items() if k != "reset"} == {"min_size": 2, "max_size": 10, "timeout": 5.0}
    assert pool["reset"] is release_session_locks  # a connection given back holds no lease lock
    assert web["CONN_HEALTH_CHECKS"] is True

    keep_worker_connection(web)  # the same settings, in a Celery worker
    assert "pool" not in web["OPTIONS"] and web["CONN_MAX_AGE"] == 300

    kept = {"CONN_MAX_AGE": 60, "OPTIONS": {}}  # DB_CONN_MAX_AGE=60: Django refuses both at once
    database_pool_options(kept)
    assert "pool" not in kept["OPTIONS"]
    monkeypatch.setenv("DB_POOL", "0")
    off = {"CONN_MAX_AGE": 0, "OPTIONS": {}}
    database_pool_options(off)
    assert "pool" not in off["OPTIONS"]
    monkeypatch.setenv("DB_POOL", "1")
    monkeypatch.setenv("DB_POOL_MAX_SIZE", "25")
    monkeypatch.setenv("DB_POOL_TIMEOUT", "2")
    sized = {"CONN_MAX_AGE": 0, "OPTIONS": {}}
    database_pool_options(sized)
    assert sized["OPTIONS"]["pool"]["max_size"] == 25 and sized["OPTIONS"]["pool"]["timeout"] == 2.0


@pytest.mark.django_db(transaction=True)
def test_a_pooled_connection_is_given_back_without_a_tickets_lease_lock():
    """A ticket's lease lock lives as long as the session that took it; a pooled session outlives
    whoever borrowed it, so giving it back lets the lock go (as a closed connection would)."""
    from django.db import connection

    from agents.lease import LOCK_NAMESPACE, lock_key
    from tests.workers import wait_until

    if not connection.settings_dict["OPTIONS"].get("pool"):
        pytest.skip("DB_POOL is off: a closed connection is closed")
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_try_advisory_lock(%s), pg_backend_pid()", [lock_key(424242)])
        locked, pid = cursor.fetchone()
    assert locked
    connection.close()  # back to the pool (the pool resets it in a thread of its own): the session lives on

    def let_go() -> bool:
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT count(*) = 0 FROM pg_locks WHERE locktype = 'advisory' AND pid = %s AND classid = %s "
                "AND objid = %s",
                [pid, LOCK_NAMESPACE, 424242],
            )
            return cursor.fetchone()[0]

    wait_until(let_go, timeout=5, what="the pooled session to let the lock go")


def test_the_server_applies_the_keepalives_to_each_session(db):  # noqa: ANN001
    from django.db import connection

    if connection.settings_dict.get("HOST", "").startswith("/") or not connection.settings_dict.get("HOST"):
        pytest.skip("a Unix-socket connection has no TCP keepalives")
    with connection.cursor() as cursor:
        cursor.execute("SHOW tcp_keepalives_idle")
        assert cursor.fetchone() == ("5",)
        cursor.execute("SHOW tcp_user_timeout")
        assert cursor.fetchone() == ("10000",)


@pytest.mark.parametrize("autocommit", [True, False])
def test_a_connection_given_back_to_the_pool_lets_go_of_its_lease_locks_and_is_idle(autocommit):
    """The pool's reset drops every session-level advisory lock (a ticket's lease) and leaves no
    transaction open, whether the connection was in autocommit (Django's way) or not."""
    import psycopg
    from django.db import connection

    from support.settings import release_session_locks

    with psycopg.connect(**connection.get_connection_params(), autocommit=True) as conn:
        conn.execute("SELECT pg_advisory_lock(4242), pg_advisory_lock(4243)")
        conn.autocommit = autocommit
        release_session_locks(conn)
        assert conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
        held = conn.execute(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid()"
        ).fetchone()
        assert held == (0,)
