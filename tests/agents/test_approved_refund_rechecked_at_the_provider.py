"""A refund that needs an approval is checked against the payment provider too: its card shows the money the
provider holds refunded on the payment outside the ledger (read when the request is made), and the approved
refund is checked again just before it is sent.

Before, only a refund nobody reviewed read the provider's record. A refund that needed an approval (above
the threshold, a flagged customer...) showed staff nothing of a refund made in the provider's dashboard, and
was sent once approved without a look: a person who refunded $300 there, then approved the customer's $300
request without knowing, paid it twice. Money the provider comes to hold outside the ledger after the
approval hands the refund back to staff, with the reason, instead of paying it.
"""

from __future__ import annotations

import pytest
from django.test import Client

from agents.models import ApprovalDecision, CallStatus, Refund, RunStatus, ToolCall
from agents.runner import advance
from approvals import services as approval_services
from approvals.models import ApprovalRequest
from tests.agents.test_confirmation import answer, signed_in
from tests.approvals.conftest import make_staff
from tests.conftest import make_customer, make_order
from tickets import services as ticket_services

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(120)]


def _paid_at_the_provider(sandbox, payment_reference: str) -> list[int]:  # noqa: ANN001
    return sorted(r["amount"] for r in sandbox.refunds() if r["payment_intent"] == payment_reference)


def _dashboard_refund(provider, order, cents: int, key: str) -> None:  # noqa: ANN001
    """A person refunds in the provider's dashboard: nothing of it reaches the ledger."""
    provider.create_refund(
        payment_reference=order.payment_reference, amount_cents=cents, currency="usd", idempotency_key=key, metadata={}
    )


def _card(user) -> str:  # noqa: ANN001
    client = Client()
    client.force_login(user)
    page = client.get("/staff/approvals/")
    assert page.status_code == 200
    return page.content.decode()


def test_the_card_of_a_refund_over_the_threshold_shows_what_the_provider_holds(sandbox, provider):  # noqa: ANN001
    customer = make_customer()
    order = make_order(customer, number="P-5501", total_cents=60000)
    sandbox.seed_payment(order.payment_reference, order.total_cents, order.currency)
    _dashboard_refund(provider, order, 30000, "dashboard-5501")

    ticket, _ = ticket_services.ticket_open(
        customer=customer, subject="Refund", body="Please refund $300 of order P-5501, it arrived broken"
    )
    assert advance(ticket.pk).state == RunStatus.WAITING_APPROVAL
    request = ApprovalRequest.objects.get(ticket=ticket, status="pending")
    assert "above" in request.reason, request.reason  # asked for another reason: the threshold

    staff = make_staff("decides", can_decide=True)
    page = _card(staff)
    assert "payment provider holds $300.00" in page, "the card says nothing of the $300 refunded at the provider"

    # Approved knowingly (the card showed it): paid once, under its key.
    approval_services.approval_decide(approval_id=request.pk, user=staff, approve=True)
    advance(ticket.pk)
    assert _paid_at_the_provider(sandbox, order.payment_reference) == [30000, 30000]
    assert Refund.objects.get(ticket=ticket).status == "succeeded"


def test_money_refunded_at_the_provider_after_the_request_hands_the_approved_refund_back(sandbox, provider):  # noqa: ANN001
    customer = make_customer()
    order = make_order(customer, number="P-5502", total_cents=60000)
    sandbox.seed_payment(order.payment_reference, order.total_cents, order.currency)
    ticket, _ = ticket_services.ticket_open(
        customer=customer, subject="Refund", body="Please refund $300 of order P-5502, it arrived broken"
    )
    assert advance(ticket.pk).state == RunStatus.WAITING_APPROVAL
    request = ApprovalRequest.objects.get(ticket=ticket, status="pending")
    staff = make_staff("decides", can_decide=True)
    assert "payment provider holds" not in _card(staff)

    # Meanwhile a colleague refunds the $300 in the provider's dashboard; the card was read before.
    _dashboard_refund(provider, order, 30000, "dashboard-5502")
    approval_services.approval_decide(approval_id=request.pk, user=staff, approve=True)
    state = advance(ticket.pk).state

    assert _paid_at_the_provider(sandbox, order.payment_reference) == [30000], (
        "the approved refund was paid on top of the $300 refunded at the provider since the request"
    )
    assert state == RunStatus.WAITING_APPROVAL
    call = ToolCall.objects.get(ticket=ticket, name="issue_refund")
    assert call.status == CallStatus.AWAITING_APPROVAL
    again = ApprovalRequest.objects.get(tool_call=call, status="pending")
    assert again.pk != request.pk
    assert "payment provider" in again.reason and "$300.00" in again.reason, again.reason
    assert "payment provider holds $300.00" in _card(staff)
    assert not Refund.objects.exists()

    # Approved again, knowing: paid once.
    approval_services.approval_decide(approval_id=again.pk, user=staff, approve=True)
    advance(ticket.pk)
    call.refresh_from_db()
    assert call.approval_decision == ApprovalDecision.APPROVED and call.status == CallStatus.SUCCEEDED
    assert _paid_at_the_provider(sandbox, order.payment_reference) == [30000, 30000]


def _approve_from_the_card(client: Client, request: ApprovalRequest, provider_seen: str) -> None:
    """The card's Approve form, as the page sends it."""
    response = client.post(
        f"/staff/approvals/{request.pk}/decide/",
        {"decision": "approve", "provider_seen": provider_seen, "confirm_amount": str(request.amount_cents)},
    )
    assert response.status_code == 302, response.content.decode()[-2000:]


def test_an_approval_keeps_what_its_card_showed_of_the_provider(sandbox, provider):  # noqa: ANN001
    """A card read before the provider's refunds were (they are read just after the request is made),
    approved after, showed staff none of them: the refund is handed back to them, not paid. The card's
    own form, sent back as read, pays it once."""
    customer = make_customer()
    order = make_order(customer, number="P-5503", total_cents=60000)
    sandbox.seed_payment(order.payment_reference, order.total_cents, order.currency)
    _dashboard_refund(provider, order, 30000, "dashboard-5503")
    ticket, _ = ticket_services.ticket_open(
        customer=customer, subject="Refund", body="Please refund $300 of order P-5503, it arrived broken"
    )
    assert advance(ticket.pk).state == RunStatus.WAITING_APPROVAL
    request = ApprovalRequest.objects.get(ticket=ticket, status="pending")
    staff = make_staff("decides", can_decide=True)
    client = Client()
    client.force_login(staff)

    # The page read before the provider was: its card said "not read yet".
    _approve_from_the_card(client, request, "unread")
    assert advance(ticket.pk).state == RunStatus.WAITING_APPROVAL
    assert _paid_at_the_provider(sandbox, order.payment_reference) == [30000]
    again = ApprovalRequest.objects.get(ticket=ticket, status="pending")
    assert "$300.00" in again.reason and "did not show" in again.reason, again.reason

    page = client.get("/staff/approvals/").content.decode()
    shown = page.split('name="provider_seen" value="', 1)[1].split('"', 1)[0]
    assert shown.startswith("read:re_"), shown
    _approve_from_the_card(client, again, shown)
    advance(ticket.pk)
    assert _paid_at_the_provider(sandbox, order.payment_reference) == [30000, 30000]


@pytest.mark.customer_confirms
@pytest.mark.usefixtures("quick_provider_retries")
def test_money_refunded_at_the_provider_while_the_customer_confirms_hands_the_approved_refund_back(sandbox, provider):  # noqa: ANN001
    """Approved, then asked of the customer: the dashboard refund made before their Confirm is checked next to
    the payment, as after an approval alone. Approved again, it is paid once without asking them again."""
    customer = make_customer()
    order = make_order(customer, number="P-5504", total_cents=60000)
    sandbox.seed_payment(order.payment_reference, order.total_cents, order.currency)
    ticket, _ = ticket_services.ticket_open(
        customer=customer, subject="Refund", body="Please refund $300 of order P-5504, it arrived broken"
    )
    advance(ticket.pk)
    staff = make_staff("decides", can_decide=True)
    request = ApprovalRequest.objects.get(ticket=ticket, status="pending")
    approval_services.approval_decide(approval_id=request.pk, user=staff, approve=True)
    advance(ticket.pk)
    call = ToolCall.objects.get(ticket=ticket, name="issue_refund")
    assert call.status == CallStatus.AWAITING_CONFIRMATION

    _dashboard_refund(provider, order, 30000, "dashboard-5504")
    assert answer(signed_in(customer), ticket, call, "confirm").status_code == 200
    assert advance(ticket.pk).state == RunStatus.WAITING_APPROVAL
    assert _paid_at_the_provider(sandbox, order.payment_reference) == [30000], (
        "the refund the customer confirmed was paid on top of the $300 refunded at the provider after the approval"
    )
    again = ApprovalRequest.objects.get(ticket=ticket, status="pending")
    assert "$300.00" in again.reason, again.reason

    approval_services.approval_decide(approval_id=again.pk, user=staff, approve=True)
    advance(ticket.pk)
    call.refresh_from_db()
    assert call.status == CallStatus.SUCCEEDED
    assert _paid_at_the_provider(sandbox, order.payment_reference) == [30000, 30000]
