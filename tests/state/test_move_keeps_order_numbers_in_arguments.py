"""A ticket subject that is only the order number does not erase a person's stop in a pseudonymised
move: an order number of the bundle in arguments is never rewritten (state.pseudonyms.pseudonymise).

A customer who writes the order number as the ticket's subject ("R-160123") has that subject
withheld "wherever the bundle repeats it word for word", but not inside the refund call's
arguments: were the call's order_number "[withheld: the ticket's subject]", the person's stop of
that refund would no longer be found on the new deployment, and the same refund asked again would
be paid without the staff approval the rules require.
"""

from __future__ import annotations

import pytest

from agents.models import CallStatus, Refund, RefundStatus, ToolCall
from agents.runner import advance
from approvals.models import ApprovalRequest, ApprovalStatus
from tests.agents.test_money_gates import confirm, refund_calls
from tests.agents.test_money_path import order_for
from tests.approvals.conftest import make_staff
from tests.conftest import make_customer
from tests.state.conftest import export
from tests.state.test_bundle import empty_the_ledger, restore
from tickets import services as ticket_services
from tickets.models import Customer

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(180)]

NUMBER = "R-160123"
ASK = f"Please refund $50.00 on order {NUMBER}"


@pytest.fixture(autouse=True)
def _quick_retries(settings):  # noqa: ANN001, ANN202
    settings.REFUND_RETRY_FIRST_WAIT_MS = 5
    settings.REFUND_RETRY_MAX_WAIT_MS = 20


@pytest.mark.customer_confirms
def test_a_person_stop_survives_a_pseudonymised_move_when_the_subject_is_the_order_number(sandbox, tmp_path):
    person = make_staff("ticket-person", can_decide=False)
    customer = make_customer()
    order = order_for(customer, NUMBER, 5000, sandbox)
    # The customer names the order in the subject line, as customers do.
    ticket, _ = ticket_services.ticket_open(customer=customer, subject=NUMBER, body=ASK)
    advance(ticket.pk)
    (first,) = refund_calls(ticket)
    assert first.status == CallStatus.AWAITING_CONFIRMATION
    # A person takes the ticket over while the refund waits for the customer's Confirm, then hands it back.
    ticket_services.ticket_take_over(ticket=ticket, user=person)
    advance(ticket.pk)
    first.refresh_from_db()
    assert first.status == CallStatus.CANCELLED
    ticket_services.ticket_hand_back(ticket=ticket, user=person)

    path = export(tmp_path, ticket, name="pseudonymised")  # the default bundle
    empty_the_ledger()
    restore(path)

    moved = ToolCall.objects.get(pk=first.pk)
    customer = Customer.objects.get(pk=customer.pk)
    # On the new deployment the customer asks for the same refund again, in a new ticket.
    again_ticket, _ = ticket_services.ticket_open(customer=customer, subject="Refund", body=ASK)
    advance(again_ticket.pk)
    again = refund_calls(again_ticket)[-1]
    for call in refund_calls(again_ticket):
        if call.status == CallStatus.AWAITING_CONFIRMATION and call.confirmation_text:
            confirm(again_ticket, call)
    advance(again_ticket.pk)

    approved = set(
        ApprovalRequest.objects.filter(status=ApprovalStatus.APPROVED).values_list("tool_call_id", flat=True)
    )
    unreviewed = [
        r.amount_cents
        for r in Refund.objects.filter(order_id=order.pk, status=RefundStatus.SUCCEEDED)
        if r.tool_call_id not in approved
    ]
    assert again.approval_required and unreviewed == [], (
        "a refund a person stopped was paid unreviewed on the new deployment after a (pseudonymised) move: "
        f"paid {unreviewed}; the stopped call's arguments after the move: {moved.arguments}; "
        f"the new call: approval_required={again.approval_required} reason={again.approval_reason!r}"
    )
