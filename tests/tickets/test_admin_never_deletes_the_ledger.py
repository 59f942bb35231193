"""Nothing of the ledger can be deleted from the admin, not even by a superuser: a ticket (which took
its customer's messages, its timeline, runs, steps, tool calls and approval requests with it), a
timeline event, a run, a model step, a tool call, a lease, a refund, an approval request. Neither the
page's Delete nor the list's "Delete selected" is there; posted anyway, it is refused and the rows stay.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from django.db.models import Model

from agents.models import AgentRun, ModelStep, Refund, RefundStatus, TicketLease, ToolCall
from agents.runner import advance
from approvals.models import ApprovalRequest
from tests.conftest import make_customer, make_order
from tickets import services
from tickets.models import Message, Ticket, TicketEvent

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def ledger() -> dict[type[Model], Callable[[], Model]]:
    """A ticket whose agent asked for a staff approval of a refund: how to get one row of each ledger
    table on it. (A refund row is made only when asked for: it would keep the ticket by its PROTECT.)"""
    customer = make_customer()
    order = make_order(customer, total_cents=64900, number="D-1001")
    ticket, _ = services.ticket_open(
        customer=customer, subject="Refund", body="Please refund my order D-1001, it stopped working"
    )
    advance(ticket.pk)
    call = ToolCall.objects.get(ticket=ticket, name="issue_refund")
    assert ApprovalRequest.objects.filter(ticket=ticket).exists()
    TicketLease.objects.get_or_create(ticket=ticket, defaults={"owner": "w1", "epoch": 1})
    return {
        Ticket: lambda: ticket,
        TicketEvent: lambda: TicketEvent.objects.filter(ticket=ticket).first(),
        AgentRun: lambda: AgentRun.objects.get(ticket=ticket),
        ModelStep: lambda: ModelStep.objects.filter(ticket=ticket).first(),
        ToolCall: lambda: call,
        TicketLease: lambda: TicketLease.objects.get(ticket=ticket),
        ApprovalRequest: lambda: ApprovalRequest.objects.get(ticket=ticket),
        Refund: lambda: Refund.objects.create(
            ticket=ticket,
            order=order,
            tool_call=call,
            idempotency_key=f"refund:{call.idempotency_key}",
            amount_cents=100,
            currency="usd",
            status=RefundStatus.FAILED,
        ),
    }


LEDGER = [Ticket, TicketEvent, AgentRun, ModelStep, ToolCall, TicketLease, ApprovalRequest, Refund]


def counts(ticket: Ticket) -> dict[str, int]:
    return {
        "messages": Message.objects.filter(ticket=ticket).count(),
        "events": TicketEvent.objects.filter(ticket=ticket).count(),
        "runs": AgentRun.objects.filter(ticket=ticket).count(),
        "steps": ModelStep.objects.filter(ticket=ticket).count(),
        "calls": ToolCall.objects.filter(ticket=ticket).count(),
        "approvals": ApprovalRequest.objects.filter(ticket=ticket).count(),
        "tickets": Ticket.objects.filter(pk=ticket.pk).count(),
    }


def url(model: type[Model]) -> str:
    return f"/admin/{model._meta.app_label}/{model._meta.model_name}/"


@pytest.mark.parametrize("model", LEDGER, ids=lambda m: m.__name__)
def test_a_superuser_cannot_delete_a_ledger_row_from_its_page(admin_client, ledger, model):
    row = ledger[model]()
    ticket = ledger[Ticket]()
    before = counts(ticket)

    posted = admin_client.post(f"{url(model)}{row.pk}/delete/", {"post": "yes"})
    asked = admin_client.get(f"{url(model)}{row.pk}/delete/")
    page = admin_client.get(f"{url(model)}{row.pk}/change/")

    assert posted.status_code == 403
    assert model.objects.filter(pk=row.pk).exists()
    assert counts(ticket) == before
    assert asked.status_code == 403
    assert page.status_code == 200
    assert f"{row.pk}/delete/" not in page.content.decode()  # no Delete link on the page


@pytest.mark.parametrize("model", LEDGER, ids=lambda m: m.__name__)
def test_a_superuser_cannot_delete_ledger_rows_from_the_list(admin_client, ledger, model):
    row = ledger[model]()
    ticket = ledger[Ticket]()
    before = counts(ticket)

    posted = admin_client.post(
        url(model), {"action": "delete_selected", "_selected_action": [row.pk], "post": "yes"}, follow=True
    )
    listed = admin_client.get(url(model))

    assert model.objects.filter(pk=row.pk).exists()
    assert counts(ticket) == before
    assert "Are you sure" not in posted.content.decode()
    assert listed.status_code == 200
    assert "delete_selected" not in listed.content.decode()  # the bulk action is not offered


def test_customer_messages_have_no_admin_of_their_own(admin_client, ledger):
    assert admin_client.get(url(Message)).status_code == 404
