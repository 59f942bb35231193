"""A Celery worker answers one doorbell after another on the same PostgreSQL session: no new
connection before each answer (Celery's own Django fix-up closes it around every task)."""

from __future__ import annotations

import pytest
from django.db import connection

from tests import workers
from tests.conftest import make_customer
from tests.workers import wait_until
from tickets import services as ticket_services
from tickets.models import AuthorKind, Message

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.workers, pytest.mark.timeout(120)]

NAME = "worker-under-test"


def worker_sessions(name: str = NAME) -> list[int]:
    with connection.cursor() as cursor:
        cursor.execute(  # this test database's: another test worker may run this test on its own
            "SELECT pid FROM pg_stat_activity WHERE application_name = %s AND datname = current_database()", [name]
        )
        return [pid for (pid,) in cursor.fetchall()]


@pytest.mark.parametrize("pool", ["prefork", "solo"])
def test_a_worker_answers_one_ticket_after_another_on_one_database_session(cluster, pool):
    cluster.worker(pool=pool, DATABASE_URL=f"{workers.test_database_url()}?application_name={NAME}")
    customer = make_customer()
    seen: list[list[int]] = []
    tools: list[list[int]] = []  # the session the worker's tool calls run on (agents.tool_thread)
    for n in range(3):
        ticket, _ = ticket_services.ticket_open(customer=customer, subject=f"Question {n}", body="bench:1")
        wait_until(
            lambda t=ticket: Message.objects.filter(ticket=t, author_kind=AuthorKind.AGENT).exists(),
            timeout=60,
            what=f"the answer on ticket {n}",
            cluster=cluster,
        )
        # Its lease's heartbeat may hold a session of its own for a moment; the worker's stays.
        seen.append(wait_until(lambda: (s := worker_sessions()) and len(s) == 1 and s, timeout=10, what="one session"))
        tools.append(worker_sessions(f"{NAME} (tool calls)"))
    assert seen[0] == seen[1] == seen[2], seen
    # Each answer calls a tool (``bench:1``): the tool calls' session is kept from one to the next too.
    assert len(tools[0]) == 1 and tools[0] == tools[1] == tools[2], tools
