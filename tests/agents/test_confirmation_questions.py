"""The customer's Confirm: only a question the customer was shown can be answered (one marked behind
an earlier call is not, and is asked when reached), and a call asked again shows its new question
with its buttons, its earlier answer on the earlier question only."""

from __future__ import annotations

import pytest
from django.test import Client

from agents.calls import arguments_digest
from agents.models import CallStatus, ToolCall
from agents.runner import advance
from approvals import services as approval_services
from approvals.models import ApprovalRequest
from tests.agents.test_money_gates import Refunds, confirm, only_the_order_threshold, refund_calls
from tests.agents.test_money_path import order_for, paid
from tests.approvals.conftest import make_staff
from tests.conftest import make_customer
from tickets import services as ticket_services

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.customer_confirms,
    pytest.mark.timeout(120),
    pytest.mark.usefixtures("quick_provider_retries"),
]


def post_answer(ticket, call, what, digest):  # noqa: ANN001, ANN201
    client = Client()
    client.force_login(ticket.customer.user)
    return client.post(
        f"/tickets/{ticket.pk}/confirmations/{call.pk}",
        {"answer": what, "digest": digest},
        content_type="application/json",
    )


def test_a_question_never_asked_cannot_be_confirmed(sandbox):  # noqa: ANN001
    """A refund behind another call's staff approval is marked for confirmation but not asked yet:
    no question in the chat, no expiry. An answer to it must be refused, and it must never be paid
    without the customer having been shown its question."""
    only_the_order_threshold()
    customer = make_customer()
    big = order_for(customer, "R4-1001", 30000, sandbox)
    small = order_for(customer, "R4-1002", 5000, sandbox)
    ticket, _ = ticket_services.ticket_open(customer=customer, subject="Refunds", body="Refund both")
    model = Refunds(("R4-1001", 25000), ("R4-1002", 1000))
    advance(ticket.pk, model=model)
    first, second = refund_calls(ticket)
    assert first.status == CallStatus.AWAITING_APPROVAL
    assert second.status == CallStatus.AWAITING_CONFIRMATION
    assert second.confirmation_text == "" and second.confirmation_expires_at is None  # marked, not asked
    assert not ticket.events.filter(kind="confirmation_requested", payload__call_id=second.pk).exists()

    # The customer (or a script) answers the question they were never shown.
    early = post_answer(ticket, second, "confirm", arguments_digest(second.arguments))
    second.refresh_from_db()
    assert early.status_code == 409, (early.status_code, early.content)
    assert second.confirmation_decision is None

    # Whatever happened above: the second refund is never paid before its question was shown.
    staff = make_staff("r4-approver", can_decide=True)
    approval_services.approval_decide(
        approval_id=ApprovalRequest.objects.get(tool_call=first).pk, user=staff, approve=True,
        note="ok",
    )  # fmt: skip
    advance(ticket.pk, model=model)
    first.refresh_from_db()
    assert first.status == CallStatus.AWAITING_CONFIRMATION and first.confirmation_text
    assert confirm(ticket, first) == 200
    advance(ticket.pk, model=model)
    assert [r["amount"] for r in paid(sandbox, big)] == [25000]
    if paid(sandbox, small):
        assert ticket.events.filter(kind="confirmation_requested", payload__call_id=second.pk).exists(), (
            "the $10.00 refund was paid without its question ever being shown to the customer"
        )


def test_a_question_asked_again_is_shown_with_its_buttons(sandbox):  # noqa: ANN001
    """The customer confirmed $49.99; the call's arguments then changed (to $30.00): the confirmation
    does not cover them, and the customer is asked again, on the same call. A page loaded now must
    offer Confirm on the new question (the earlier answer answered the earlier question only)."""
    customer = make_customer()
    order = order_for(customer, "R4-2001", 4999, sandbox)
    ticket, _ = ticket_services.ticket_open(customer=customer, subject="Refund", body="Refund R4-2001")
    model = Refunds(("R4-2001", 4999))
    advance(ticket.pk, model=model)
    (call,) = refund_calls(ticket)
    assert confirm(ticket, call) == 200
    ToolCall.objects.filter(pk=call.pk).update(arguments={"order_number": "R4-2001", "amount_cents": 3000})
    advance(ticket.pk, model=model)
    call.refresh_from_db()
    assert paid(sandbox, order) == []
    assert call.status == CallStatus.AWAITING_CONFIRMATION and call.confirmation_decision is None
    assert call.confirmation_text == "Refund $30.00 to the card used for order R4-2001?"

    client = Client()
    client.force_login(customer.user)
    page = client.get(f"/tickets/{ticket.pk}/").content.decode()
    new_card = page[page.index("Refund $30.00 to the card used for order R4-2001?") :]
    new_card = new_card[: new_card.index("</li>")]
    assert 'data-answer="confirm">Confirm</button>' in new_card, new_card
