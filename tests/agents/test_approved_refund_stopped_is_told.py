"""A refund staff approved that a person stops before it is paid is said stopped in the chat.

README, "A person's decision ends the agent's part": taking the ticket over, resolving or closing
it ends the agent's run, and what it left waiting is never paid. Staff's approval had already told
the customer "Our team approved your request; finishing it now." When the take-over lands before a
worker applied that approval, the chat went on saying so: nothing told the customer the refund
they were promised was not made. Now the chat says, under the approval, that nothing was done.
"""

from __future__ import annotations

import pytest
from django.test import Client

from agents.models import CallStatus, ToolCall
from agents.runner import advance
from approvals import services as approval_services
from approvals.models import ApprovalRequest
from tests.agents.conftest import while_tool_runs
from tests.agents.test_money_gates import Refunds, confirm
from tests.agents.test_money_path import order_for, paid
from tests.approvals.conftest import make_staff
from tests.conftest import make_customer
from tickets import services as ticket_services
from tickets.models import TicketEvent

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.timeout(120),
    pytest.mark.usefixtures("quick_provider_retries"),
]

STOPPED = "The approved request was stopped before it was carried out, so nothing was done."


@pytest.fixture
def approver(db):  # noqa: ANN001, ANN201
    return make_staff("stop-approver", can_decide=True)


def _chat(ticket) -> str:  # noqa: ANN001
    client = Client()
    client.force_login(ticket.customer.user)
    return client.get(f"/tickets/{ticket.pk}/").content.decode()


@pytest.mark.parametrize("then", ["take_over", "resolve", "close", "take_over_next_to_the_payment"])
def test_an_approved_refund_a_person_stops_before_it_is_paid_is_said_stopped(
    sandbox, approver, person, then, monkeypatch
):  # noqa: ANN001
    customer = make_customer()
    order = order_for(customer, "G-9101", 64900, sandbox)
    ticket, _ = ticket_services.ticket_open(customer=customer, subject="Refund", body="Refund G-9101")
    advance(ticket.pk, model=Refunds(("G-9101", 64900)))  # above the threshold: it waits for staff
    approval = ApprovalRequest.objects.get(ticket=ticket)
    approval_services.approval_decide(approval_id=approval.pk, user=approver, approve=True)
    assert "finishing it now" in _chat(ticket)

    # A person takes the ticket before a worker applied the approval (or as its refund is about to be sent).
    if then == "take_over_next_to_the_payment":
        taking = lambda: ticket_services.ticket_take_over(ticket=ticket.pk, user=person)  # noqa: E731
        while_tool_runs(monkeypatch, "issue_refund", taking)
    else:
        ticket_services.ticket_take_over(ticket=ticket, user=person)
    if then == "resolve":
        ticket_services.ticket_resolve(ticket=ticket, user=person)
    elif then == "close":
        ticket_services.ticket_close(ticket=ticket, user=person)
    advance(ticket.pk, model=Refunds(("G-9101", 64900)))  # the doorbell: the run ends, nothing is paid

    assert paid(sandbox, order) == []
    call = ToolCall.objects.get(ticket=ticket, name="issue_refund")
    assert call.status == CallStatus.FAILED
    chat = _chat(ticket)
    assert STOPPED in chat, "the customer still reads that the approved refund is being finished"
    assert chat.index(STOPPED) > chat.index("finishing it now")
    told = TicketEvent.objects.filter(ticket=ticket, kind="approved_call_withdrawn", is_public=True)
    assert [e.payload["call_id"] for e in told] == [call.pk]

    advance(ticket.pk, model=Refunds(("G-9101", 64900)))  # another doorbell says nothing more
    assert TicketEvent.objects.filter(ticket=ticket, kind="approved_call_withdrawn").count() == 1

    # Staff's decision history says it too, beside "Approved", with why: not a refund made.
    staff = Client()
    staff.force_login(approver)
    history = staff.get(f"/staff/approvals/history/?ticket={ticket.pk}").content.decode()
    assert "Approved" in history
    assert "then stopped before it ran (a person took the ticket over): nothing was done" in history


@pytest.mark.customer_confirms
def test_an_approved_refund_whose_question_a_take_over_kept_from_the_customer_is_said_stopped(
    sandbox, approver, person, monkeypatch
):  # noqa: ANN001
    """Staff approved; the worker applying it asks the customer to confirm, as a person takes the ticket
    over: the question is never shown (nobody would act on it), so the approval is the last the customer
    read about this refund. The run's end says it was stopped."""
    from agents import approval as approval_module

    customer = make_customer()
    order = order_for(customer, "G-9102", 64900, sandbox)
    ticket, _ = ticket_services.ticket_open(customer=customer, subject="Refund", body="Refund G-9102")
    advance(ticket.pk, model=Refunds(("G-9102", 64900)))
    approval = ApprovalRequest.objects.get(ticket=ticket)
    approval_services.approval_decide(approval_id=approval.pk, user=approver, approve=True)

    asking = approval_module.pause_for_confirmation

    def taken_over_as_asked(**kwargs):  # noqa: ANN003, ANN202
        ticket_services.ticket_take_over(ticket=ticket.pk, user=person)  # lands with the question
        return asking(**kwargs)

    monkeypatch.setattr(approval_module, "pause_for_confirmation", taken_over_as_asked)
    advance(ticket.pk, model=Refunds(("G-9102", 64900)))  # applies the approval: the question, unshown
    monkeypatch.undo()
    assert not TicketEvent.objects.filter(ticket=ticket, kind="confirmation_requested", is_public=True).exists()
    advance(ticket.pk, model=Refunds(("G-9102", 64900)))  # the take-over's doorbell: the run ends

    assert paid(sandbox, order) == []
    assert ToolCall.objects.get(ticket=ticket, name="issue_refund").status == CallStatus.CANCELLED
    assert STOPPED in _chat(ticket), "the customer still reads that the approved refund is being finished"


@pytest.mark.customer_confirms
def test_a_refund_the_customer_confirmed_that_a_take_over_stops_next_to_the_payment_is_said_stopped(
    sandbox, person, monkeypatch
):  # noqa: ANN001
    """The customer pressed Confirm ("You confirmed."); a person takes the ticket over as the worker is
    about to send the refund. Nothing is paid, and the chat says so under the question, as it does for
    a Confirm the run's end closed before a worker acted on it."""
    customer = make_customer()
    order = order_for(customer, "W-9201", 5000, sandbox)
    ticket, _ = ticket_services.ticket_open(
        customer=customer, subject="Refund", body="Please refund $50.00 on order W-9201"
    )
    advance(ticket.pk)  # the offline model asks the customer to confirm
    (call,) = ToolCall.objects.filter(ticket=ticket, name="issue_refund")
    assert confirm(ticket, call) == 200
    taking = lambda: ticket_services.ticket_take_over(ticket=ticket.pk, user=person)  # noqa: E731
    while_tool_runs(monkeypatch, "issue_refund", taking)
    advance(ticket.pk)  # applies the Confirm; the refund meets the take-over next to the payment

    assert paid(sandbox, order) == []
    call.refresh_from_db()
    assert call.status == CallStatus.FAILED, call.error
    withdrawn = TicketEvent.objects.filter(ticket=ticket, kind="confirmation_withdrawn", is_public=True)
    assert [e.payload["call_id"] for e in withdrawn] == [call.pk], "the customer still reads only 'You confirmed.'"
    assert "This question was withdrawn, so nothing was done." in _chat(ticket)
