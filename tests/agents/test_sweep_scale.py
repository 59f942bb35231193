"""The sweep looks at the tickets that may have work for the agent, not at every ticket: paused and
answered tickets cost it nothing (DESIGN.md, invariant 7, says a pause costs disk, not processes;
nor should it cost the sweeper time)."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from agents.selectors import tickets_with_agent_work
from tests.conftest import make_customer
from tickets import services as ticket_services
from tickets.models import Ticket

pytestmark = pytest.mark.django_db


def _ticket_rows_examined(plan: dict[str, Any]) -> float:
    """Rows of tickets_ticket the plan read (kept or filtered out), over all its loops."""
    own = 0.0
    if plan.get("Relation Name") == "tickets_ticket":
        own = (plan.get("Actual Rows", 0) + plan.get("Rows Removed by Filter", 0)) * plan.get("Actual Loops", 1)
    return own + sum(_ticket_rows_examined(child) for child in plan.get("Plans", []))


def test_the_sweep_reads_the_tickets_with_work_not_every_ticket():
    customer = make_customer()
    Ticket.objects.bulk_create(Ticket(customer=customer, subject=f"quiet {n}") for n in range(3000))
    waiting, _ = ticket_services.ticket_open(customer=customer, subject="Hello", body="Anyone there?")
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE tickets_ticket; ANALYZE tickets_message")

    with CaptureQueriesContext(connection) as queries:
        assert tickets_with_agent_work() == [waiting.pk]
    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + queries.captured_queries[-1]["sql"])
        (plan,) = cursor.fetchone()[0]

    # One ticket has work; the sweep reads about that one, not the 3,001.
    assert _ticket_rows_examined(plan["Plan"]) <= 10


def test_the_sweeps_query_is_never_compiled_by_the_server(transactional_db):
    """Ten thousand paused tickets made PostgreSQL estimate the sweep's query (a union of the tickets
    that may have work, each checked by a dozen subqueries) above ``jit_above_cost``: it then compiled
    212 functions with LLVM, about 700 ms, for a query that ran in 5 ms, on every sweep (every 3 s).
    The product's sessions run without JIT: its queries are short ones, each over few rows."""
    customer = make_customer()
    waiting, _ = ticket_services.ticket_open(customer=customer, subject="Hello", body="Anyone there?")
    with CaptureQueriesContext(connection) as queries:
        assert tickets_with_agent_work() == [waiting.pk]
    sql = queries.captured_queries[-1]["sql"]
    with connection.cursor() as cursor:
        cursor.execute("SHOW jit")
        assert cursor.fetchone()[0] == "off", "the product's database sessions may compile queries (jit)"
        cursor.execute("SELECT pg_jit_available()")
        if not cursor.fetchone()[0]:
            return  # a server built without LLVM compiles nothing; the setting above is what is checked
        # Any estimate above the threshold, as ten thousand paused tickets gave: nothing is compiled.
        cursor.execute("SET jit_above_cost = 0")
        try:
            cursor.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + sql)
            (plan,) = cursor.fetchone()[0]
        finally:
            cursor.execute("RESET jit_above_cost")
    assert "JIT" not in plan, f"the sweep's query was compiled: {plan['JIT']}"
