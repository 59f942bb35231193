"""On the admin's lists of the agent's ledger (runs, model steps, tool calls, leases, refunds, approval
requests), a ticket's number finds that ticket's rows only, as on the ticket list: "1" listed the rows
of tickets 1, 10, 11... (any ticket whose number has a 1 in it), and a bulk action on what the search
showed ("Move paused runs to the active profile version", "Reconcile") acted on other tickets' rows."""

from __future__ import annotations

import pytest
from django.db.models import Model

from agents.models import AgentRun, ModelStep, Refund, RefundStatus, TicketLease, ToolCall
from agents.runner import advance
from approvals.models import ApprovalRequest
from tests.conftest import make_customer, make_order
from tickets import services

pytestmark = pytest.mark.django_db(transaction=True, reset_sequences=True)

LEDGER = [AgentRun, ModelStep, ToolCall, TicketLease, Refund, ApprovalRequest]


def paused_refund_ticket(n: int) -> int:
    """A ticket whose agent asked for a staff approval of a refund: a run, steps, calls, a lease, a request,
    a refund."""
    customer = make_customer()
    order = make_order(customer, total_cents=64900, number=f"S-{n:04d}")
    ticket, _ = services.ticket_open(
        customer=customer, subject="Refund", body=f"Please refund my order {order.number}, it stopped working"
    )
    advance(ticket.pk)
    call = ToolCall.objects.get(ticket=ticket, name="issue_refund")
    Refund.objects.create(
        ticket=ticket, order=order, tool_call=call, idempotency_key=f"refund:{call.idempotency_key}",
        amount_cents=100, currency="usd", status=RefundStatus.FAILED,
    )  # fmt: skip
    TicketLease.objects.get_or_create(ticket=ticket, defaults={"owner": "w1", "epoch": 1})
    return ticket.pk


@pytest.mark.parametrize("term", ["1", "#1"])
@pytest.mark.parametrize("model", LEDGER, ids=lambda m: m.__name__)
def test_a_ticket_number_lists_that_tickets_rows_only(admin_client, model: type[Model], term: str):  # noqa: ANN001
    tickets = [paused_refund_ticket(n) for n in range(11)]
    assert tickets[0] == 1 and tickets[10] == 11  # "1" is in 10's and 11's numbers too

    found = admin_client.get(f"/admin/{model._meta.app_label}/{model._meta.model_name}/", {"q": term})

    assert found.status_code == 200
    listed = {row.ticket_id for row in found.context["cl"].result_list}
    assert listed == {1}


def test_words_are_still_searched_as_text(admin_client):  # noqa: ANN001
    paused_refund_ticket(1)

    found = admin_client.get("/admin/agents/toolcall/", {"q": "issue_ref"})

    assert [row.name for row in found.context["cl"].result_list] == ["issue_refund"]
