"""The database cutting the workers' sessions again and again hands no ticket to a person.

Every second for 30 s the test database ends every session but the test's own (as a failover, a
proxy restarting or an administrator's pg_terminate_backend would), while a worker answers six
tickets, three of them refunds. Each cut fails the step under way with OperationalError ("the
connection is closed"), and three such failures in a row parked the ticket with a person ("Sorry,
something went wrong on our side"), a refund ticket even after its refund was paid. Seen on the
code before AGENT_OUTAGE_PATIENCE_SECONDS: two of the three refund tickets parked, their refunds
paid. A lost connection is an outage of the database, not the ticket's problem: it is tried again
with the outage's backoff, and every ticket is answered once, each refund paid once.
"""

from __future__ import annotations

import time

import pytest
from django.db import connection

from agents.models import AgentRun, Refund, RefundStatus, RunStatus, ToolCall
from agents.services import PARKED_NOTE
from tests.agents.test_crash_recovery import at_rest
from tests.agents.test_money_path import assert_money_invariants, order_for, paid
from tests.conftest import make_customer
from tests.workers import wait_until
from tickets import services as ticket_services
from tickets.models import AuthorKind, Message, TicketEvent, TicketStatus

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.workers, pytest.mark.timeout(300)]

END_THE_OTHER_SESSIONS = (
    "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE datname = current_database() "
    "AND pid <> pg_backend_pid() AND backend_type = 'client backend'"
)


def test_tickets_open_while_the_database_keeps_cutting_sessions_are_each_answered_once_and_paid_once(sandbox, cluster):
    refunds, orders = [], []
    for n in range(3):
        customer = make_customer()
        orders.append(order_for(customer, f"DB-87{n:02d}", 5000, sandbox))
        body = f"Please refund order DB-87{n:02d}, it arrived broken"
        refunds.append(ticket_services.ticket_open(customer=customer, subject="Broken", body=body)[0])
    questions = []
    for n in range(3):
        customer = make_customer()
        order_for(customer, f"DB-88{n:02d}", 5000, sandbox)
        body = f"Where is my order DB-88{n:02d}?"
        questions.append(ticket_services.ticket_open(customer=customer, subject="Where", body=body)[0])
    tickets = refunds + questions
    # Slow enough answers that cuts land in the middle of steps and calls.
    cluster.worker(OFFLINE_MODEL_TOKEN_DELAY_MS="100", AGENT_OUTAGE_RETRY_MAX_SECONDS="5")
    cluster.beat()

    ended = 0
    until = time.monotonic() + 30
    while time.monotonic() < until:
        time.sleep(1.0)
        with connection.cursor() as cursor:
            cursor.execute(END_THE_OTHER_SESSIONS)
            ended += cursor.fetchone()[0]
    assert ended > 10  # the worker's sessions (and the sandbox's) were cut again and again

    def settled(ticket) -> bool:  # noqa: ANN001
        ticket.refresh_from_db()
        return at_rest(ticket) or ticket.status == TicketStatus.WITH_HUMAN

    for ticket in tickets:
        wait_until(lambda t=ticket: settled(t), timeout=90, what=f"#{ticket.pk} settled", cluster=cluster)
    for ticket in tickets:
        assert ticket.status != TicketStatus.WITH_HUMAN, (
            f"#{ticket.pk} parked: {AgentRun.objects.filter(ticket=ticket).values_list('outcome', flat=True)[0]}"
        )
        assert not Message.objects.filter(ticket=ticket, body=PARKED_NOTE).exists()
        assert Message.objects.filter(ticket=ticket, author_kind=AuthorKind.AGENT).count() == 1
        assert AgentRun.objects.get(ticket=ticket).status == RunStatus.COMPLETED
    for ticket, order in zip(refunds, orders, strict=True):
        said = list(Message.objects.filter(ticket=ticket).values_list("body", flat=True))
        calls = list(ToolCall.objects.filter(ticket=ticket).values_list("name", "status", "error"))
        assert [r["amount"] for r in paid(sandbox, order)] == [5000], (said, calls)
        assert list(Refund.objects.filter(order=order).values_list("status", flat=True)) == [RefundStatus.SUCCEEDED]
    assert_money_invariants(sandbox)
    # The cuts did fail steps: they were waited out, not counted against the tickets.
    outages = TicketEvent.objects.filter(ticket__in=tickets, kind="agent_step_failed", payload__outage=True)
    assert outages.exists()
