"""The database's clock: the one clock every host shares."""

from __future__ import annotations

from datetime import datetime

from django.db import connection


def database_now() -> datetime:
    """Now, on the database's clock (``statement_timestamp()``). A deadline one host writes and
    another reads (a customer's question, a staff approval) is set and compared on it, so a host
    whose clock is off neither ends it early nor keeps it past its time (the lease and a failed
    step's backoff use the same clock, in SQL)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT statement_timestamp()")
        return cursor.fetchone()[0]
