"""A tool whose database connection is lost mid-call is run again, not shown to the model as failed.

The database ending a worker's session (a failover, a restart, pg_terminate_backend) while a safe
call such as ``lookup_order`` read the order recorded the call as failed, with the connection's
error as its result. The pass was then waited out as an outage, but the next pass gave the model the
failed lookup: it answered the customer without the order, and the refund they asked for was never
paid (seen under sessions cut every few seconds: a ticket answered, no refund). A safe call may run
again: an outage during it leaves it to run, and the pass is tried again after the outage's backoff.
"""

from __future__ import annotations

import dataclasses

import pytest
from django.db import OperationalError

from agents.models import CallStatus, RunStatus, ToolCall
from agents.runner import advance
from agents.tools import REGISTRY
from tests.agents.conftest import retry_time_comes
from tests.agents.test_money_path import order_for, paid
from tests.conftest import make_customer
from tickets import services as ticket_services

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_lookup_cut_off_from_the_database_is_run_again_and_the_refund_paid(sandbox, settings, monkeypatch):
    settings.AGENT_OUTAGE_PATIENCE_SECONDS = 600
    customer = make_customer()
    order = order_for(customer, "DB-9101", 4000, sandbox)
    body = "Please refund order DB-9101, it arrived broken"
    ticket, _ = ticket_services.ticket_open(customer=customer, subject="Broken", body=body)
    lookup = REGISTRY["lookup_order"]
    cuts = [OperationalError("terminating connection due to administrator command")]

    def lookup_cut_once(ctx, args):  # noqa: ANN001, ANN202
        if cuts:
            raise cuts.pop()
        return lookup.handler(ctx, args)

    monkeypatch.setitem(REGISTRY, "lookup_order", dataclasses.replace(lookup, handler=lookup_cut_once))

    states = [advance(ticket.pk).state]
    for _ in range(3):
        if states[-1] != "retry":
            break
        retry_time_comes(ticket.pk)
        states.append(advance(ticket.pk).state)

    assert not cuts and states[0] == "retry" and states[-1] == RunStatus.COMPLETED, states
    failed = list(ToolCall.objects.filter(ticket=ticket, status=CallStatus.FAILED).values_list("name", "error"))
    assert failed == [], f"the call cut off from the database was shown to the model as failed: {failed}"
    assert [r["amount"] for r in paid(sandbox, order)] == [4000]
