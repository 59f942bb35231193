"""The money path with the customer's Confirm on (the product default), driven from the customer's
chat endpoints and the staff approval dashboard: an expired question does not drop a refund staff
approved behind it, and a Confirm pressed again after a person took the ticket is refused.

Each test reads the payment sandbox's own records (a separate process, over HTTP)."""

from __future__ import annotations

import pytest
from django.test import Client
from django.utils import timezone

from agents.confirmation import confirmations_expire_due
from agents.models import CallStatus, ToolCall
from agents.runner import advance
from approvals.models import ApprovalRequest, ApprovalStatus
from tests.agents.test_money_gates import Refunds, only_the_order_threshold, refund_calls
from tests.agents.test_money_path import order_for, paid, public_words
from tests.approvals.conftest import make_staff
from tests.conftest import make_customer
from tickets import services as ticket_services

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.customer_confirms,
    pytest.mark.timeout(180),
    pytest.mark.usefixtures("quick_provider_retries"),
]


def signed_in(user) -> Client:  # noqa: ANN001
    client = Client()
    client.force_login(user)
    return client


def staff_decides(staff, approval: ApprovalRequest, decision: str, note: str = "") -> int:  # noqa: ANN001
    """A member of staff presses Approve (or Reject) on the dashboard's card."""
    response = signed_in(staff).post(
        f"/staff/approvals/{approval.pk}/decide/",
        {"decision": decision, "note": note, "confirm_amount": str(approval.amount_cents)},
    )
    return response.status_code


def test_a_refund_staff_approved_is_not_dropped_silently_when_another_question_of_its_turn_expires(sandbox):  # noqa: ANN001
    """The customer asks for two refunds in one message. The small one waits for their Confirm; the big
    one waits for staff behind it. Staff approve the big one: the chat says "Our team approved your
    request; finishing it now." The customer then does not answer the small question in time.

    Promised: an expired question pays nothing of *that* question and the customer is told; an
    approved refund goes on to the customer's Confirm ("after the limits and any approval, the
    customer sees the question"). The expiry must not end the whole run with the approved refund
    closed "not run" without a question or a word to the customer (and the approval "approved" in the
    history): the run goes on to it."""
    only_the_order_threshold()
    customer = make_customer()
    small = order_for(customer, "CQ-101", 5000, sandbox)
    big = order_for(customer, "CQ-102", 30000, sandbox)
    ticket, _ = ticket_services.ticket_open(
        customer=customer, subject="Refunds", body="Refund $10 on CQ-101 and $250 on CQ-102"
    )
    model = Refunds(("CQ-101", 1000), ("CQ-102", 25000))
    advance(ticket.pk, model=model)
    asked, reviewed = refund_calls(ticket)
    assert asked.status == CallStatus.AWAITING_CONFIRMATION and asked.confirmation_text
    assert reviewed.status == CallStatus.AWAITING_APPROVAL

    approver = make_staff("big-refund-approver", can_decide=True)
    card = ApprovalRequest.objects.get(tool_call=reviewed)
    assert staff_decides(approver, card, "approve") == 302
    assert any(
        e.payload.get("label") == "Our team approved your request; finishing it now."
        for e in ticket.events.filter(kind="approval_decided", is_public=True)
    )
    advance(ticket.pk, model=model)  # nothing to do yet: the run waits for the customer's answer first

    # The customer never answers the $10 question; beat expires it, and the agent applies it.
    ToolCall.objects.filter(pk=asked.pk).update(confirmation_expires_at=timezone.now())
    assert confirmations_expire_due() == 1
    advance(ticket.pk, model=model)

    reviewed.refresh_from_db()
    card.refresh_from_db()
    assert paid(sandbox, small) == [] and paid(sandbox, big) == []
    told_about_the_big_one = [w for w in public_words(ticket) if "CQ-102" in w]
    asked_about_the_big_one = reviewed.status == CallStatus.AWAITING_CONFIRMATION and bool(reviewed.confirmation_text)
    assert asked_about_the_big_one or told_about_the_big_one, (
        "the refund staff approved (the chat said 'finishing it now') was dropped without its question or a "
        f"word to the customer when an unrelated question expired: call {reviewed.status} ({reviewed.error!r}), "
        f"card {card.status}, customer read {public_words(ticket)}"
    )
    assert card.status == ApprovalStatus.APPROVED


def test_a_confirm_pressed_again_after_a_person_took_over_is_refused_not_reported_confirmed(sandbox, person):  # noqa: ANN001
    """The customer presses Confirm; the answer is recorded, but before any worker pays it a member of
    staff takes the ticket over, which withdraws the question (nothing will be paid). The customer's
    second tab (or the chat retrying after the first answer's response was lost: "Not sent. Check your
    connection and try again.") presses Confirm again.

    Promised (README, "A person's decision ends the agent's part"): "a Confirm or an Approve pressed
    afterwards is refused as a conflict (HTTP 409, nothing changed) with a sentence saying a person
    has the conversation": not 200 {"decision": "confirmed"}, which the chat would show as "You confirmed."
    although the question was withdrawn and nothing will ever be paid."""
    customer = make_customer()
    order = order_for(customer, "CQ-201", 4999, sandbox)
    ticket, _ = ticket_services.ticket_open(customer=customer, subject="Refund", body="Refund CQ-201")
    model = Refunds(("CQ-201", 4999))
    advance(ticket.pk, model=model)
    (call,) = refund_calls(ticket)
    answer = {"answer": "confirm", "digest": call.confirmation_digest}
    url = f"/tickets/{ticket.pk}/confirmations/{call.pk}"

    first_tab, second_tab = signed_in(customer.user), signed_in(customer.user)
    assert first_tab.post(url, answer, content_type="application/json").status_code == 200
    ticket_services.ticket_take_over(ticket=ticket, user=person)
    advance(ticket.pk, model=model)  # the run ends for the person: the question is withdrawn
    call.refresh_from_db()
    assert call.status == CallStatus.CANCELLED
    assert ticket.events.filter(kind="confirmation_withdrawn", payload__call_id=call.pk).exists()

    again = second_tab.post(url, answer, content_type="application/json")

    assert paid(sandbox, order) == []
    assert again.status_code == 409, (
        f"a Confirm pressed after a person took the ticket over was answered {again.status_code} "
        f"{again.json()} (the chat shows 'You confirmed.'), though the question was withdrawn and nothing is paid"
    )
    assert "taken this conversation over" in again.json()["error"]
