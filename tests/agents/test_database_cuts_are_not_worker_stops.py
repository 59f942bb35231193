"""A pass whose database session is cut while its worker lives on is an outage, not a worker that stopped.

The database ending a worker's session (a failover, a proxy restarting, pg_terminate_backend) drops
the ticket's advisory lock with it, which is how a dead owner is seen at once (DESIGN.md, invariant
15): the sweeper rang the ticket and another worker took it over while the first was still streaming
its step, and the take-over counted "the worker carrying this run on stopped before it finished", a
failure in a row about the ticket. A few such cuts spread over one ticket's steps parked it with a
person ("Sorry, something went wrong on our side"), though nothing was wrong with it and no worker
had stopped. A worker that lives on notices its session is gone and keeps its lease until it ends
the pass (the outage counted as one, bounded by AGENT_OUTAGE_PATIENCE_SECONDS); a worker killed
outright is still taken over at once and counted (tests/agents/test_crash_recovery.py,
test_step_that_kills_its_worker.py).
"""

from __future__ import annotations

import time

import pytest
from django.db import connection

from agents.models import AgentRun, Refund, RefundStatus, RunStatus
from agents.services import PARKED_NOTE
from tests.agents.test_crash_recovery import at_rest
from tests.agents.test_database_sessions_cut import END_THE_OTHER_SESSIONS
from tests.agents.test_money_path import assert_money_invariants, order_for, paid
from tests.conftest import make_customer
from tests.workers import wait_until
from tickets import services as ticket_services
from tickets.models import AuthorKind, Message, TicketEvent, TicketStatus

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.workers, pytest.mark.timeout(300)]

STOP_COUNTED = "the worker carrying this run on stopped"


def test_sessions_cut_under_living_workers_count_no_worker_stop_and_park_nothing(sandbox, cluster):
    tickets, orders = [], []
    for n in range(2):
        customer = make_customer()
        orders.append(order_for(customer, f"DB-89{n:02d}", 4000, sandbox))
        body = f"Please refund order DB-89{n:02d}, it arrived broken"
        tickets.append(ticket_services.ticket_open(customer=customer, subject="Broken", body=body)[0])
    # Two workers, so that one is free to take a ticket over from the other; answers streamed slowly
    # enough that most cuts land while a step streams and the worker's session is idle.
    for _ in range(2):
        cluster.worker(OFFLINE_MODEL_TOKEN_DELAY_MS="120", AGENT_OUTAGE_RETRY_MAX_SECONDS="3")
    cluster.beat()

    ended = 0
    until = time.monotonic() + 25
    while time.monotonic() < until:
        time.sleep(2.5)
        with connection.cursor() as cursor:
            cursor.execute(END_THE_OTHER_SESSIONS)
            ended += cursor.fetchone()[0]
    assert ended > 5

    def settled(ticket) -> bool:  # noqa: ANN001
        ticket.refresh_from_db()
        return at_rest(ticket) or ticket.status == TicketStatus.WITH_HUMAN

    for ticket in tickets:
        wait_until(lambda t=ticket: settled(t), timeout=120, what=f"#{ticket.pk} settled", cluster=cluster)
    failed = TicketEvent.objects.filter(ticket__in=tickets, kind="agent_step_failed")
    stops = list(failed.filter(payload__error__startswith=STOP_COUNTED).values_list("ticket_id", "payload"))
    assert stops == [], f"sessions cut under living workers were counted as workers that stopped: {stops}"
    for ticket, order in zip(tickets, orders, strict=True):
        assert ticket.status != TicketStatus.WITH_HUMAN
        assert not Message.objects.filter(ticket=ticket, body=PARKED_NOTE).exists()
        assert Message.objects.filter(ticket=ticket, author_kind=AuthorKind.AGENT).count() == 1
        assert AgentRun.objects.get(ticket=ticket).status == RunStatus.COMPLETED
        assert [r["amount"] for r in paid(sandbox, order)] == [4000]
        assert list(Refund.objects.filter(order=order).values_list("status", flat=True)) == [RefundStatus.SUCCEEDED]
    assert_money_invariants(sandbox)
