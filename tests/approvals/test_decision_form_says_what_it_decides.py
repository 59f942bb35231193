"""A staff decision is taken from the form as the card sends it, and from nothing else.

A field sent twice (``decision=reject&decision=approve``), a field the decision does not read (an
amount beside Approve), or a hidden field that names no moment of the ticket is refused with a 400
that names it, nothing decided: read as it came, the last ``decision`` counted (a Reject sent with an
Approve approved and paid the refund), an amount was dropped unread (the whole amount was approved),
and a garbled ``seen_seq`` switched off the check of what the customer wrote since the card was read.

A form that does not say what its card showed is held to what the request showed when it was made:
without ``seen_seq`` an approval went through over the customer's "please cancel" written after the
request, and without ``provider_seen`` the decision claimed the card showed every refund the
payment provider holds outside the ledger.
"""

from __future__ import annotations

from html import unescape

import pytest

from agents.models import CallStatus, RunStatus, ToolCall
from agents.runner import advance
from approvals.models import ApprovalRequest, ApprovalStatus
from tests.agents.test_approved_refund_rechecked_at_the_provider import _dashboard_refund, _paid_at_the_provider
from tests.approvals.test_approvals import provider_refunds
from tests.approvals.test_approve_after_the_customer_wrote import approve_form
from tests.approvals.test_dashboard import paused
from tests.conftest import make_customer, make_order
from tickets import services as ticket_services
from tickets.models import AuthorKind

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(120)]


def _nothing_decided(approval: ApprovalRequest) -> None:
    approval.refresh_from_db()
    assert (approval.status, approval.decided_by_id) == (ApprovalStatus.PENDING, None)
    call = ToolCall.objects.get(pk=approval.tool_call_id)
    assert (call.status, call.approval_decision) == (CallStatus.AWAITING_APPROVAL, None)


def _card_form(client, approval: ApprovalRequest) -> dict[str, str]:  # noqa: ANN001
    return approve_form(client.get("/staff/approvals/").content.decode(), approval.pk)


def test_a_decision_sent_twice_in_one_form_is_refused_and_nothing_is_paid(sandbox, client, approver):  # noqa: ANN001
    ticket, approval = paused(sandbox, "F-1001")
    client.force_login(approver)
    form = _card_form(client, approval)

    response = client.post(
        f"/staff/approvals/{approval.pk}/decide/", {**form, "decision": ["reject", "approve"], "note": "not this one"}
    )

    assert response.status_code == 400, f"{response.status_code} {response.get('Location', '')}"
    assert "'decision' was sent twice" in unescape(response.content.decode())
    _nothing_decided(approval)
    advance(ticket.pk)
    assert provider_refunds(sandbox, approval.ticket.customer.orders.get()) == []


@pytest.mark.parametrize(
    "extra",
    [{"amount_cents": "10000"}, {"note": ["ok", "only $100"]}, {"seen_seq": ["1", "999999"]}],
    ids=["an-amount-beside-approve", "two-notes", "two-seen-seq"],
)
def test_an_approval_with_a_field_it_does_not_read_or_sent_twice_is_refused(sandbox, client, approver, extra):  # noqa: ANN001
    _, approval = paused(sandbox, "F-1002")
    client.force_login(approver)
    form = {**_card_form(client, approval), **extra}

    response = client.post(f"/staff/approvals/{approval.pk}/decide/", form)

    assert response.status_code == 400, f"{response.status_code} {response.get('Location', '')}"
    (name,) = extra
    assert repr(name) in unescape(response.content.decode())
    _nothing_decided(approval)


@pytest.mark.parametrize("seen", ["12x", "-3", "", "99999999"], ids=["not-a-number", "negative", "empty", "future"])
def test_an_approval_whose_page_mark_names_no_moment_of_the_ticket_is_refused(sandbox, client, approver, seen):  # noqa: ANN001
    ticket, approval = paused(sandbox, "F-1003")
    client.force_login(approver)
    form = {**_card_form(client, approval), "seen_seq": seen}
    ticket_services.message_post(
        ticket=ticket.pk, author_kind=AuthorKind.CUSTOMER, body="Please cancel the refund, it works again now."
    )

    response = client.post(f"/staff/approvals/{approval.pk}/decide/", form)

    assert response.status_code == 400, f"{response.status_code} {response.get('Location', '')}"
    assert "'seen_seq'" in unescape(response.content.decode())
    _nothing_decided(approval)


def test_an_approval_from_a_form_without_its_page_mark_is_held_to_what_the_request_showed(sandbox, client, approver):  # noqa: ANN001
    ticket, approval = paused(sandbox, "F-1004")
    client.force_login(approver)
    form = _card_form(client, approval)
    del form["seen_seq"]
    ticket_services.message_post(
        ticket=ticket.pk, author_kind=AuthorKind.CUSTOMER, body="Please cancel the refund, it works again now."
    )
    advance(ticket.pk)  # the customer is told their message waits for the decision

    response = client.post(f"/staff/approvals/{approval.pk}/decide/", form)

    assert response.status_code == 409, f"{response.status_code} {response.get('Location', '')}"
    # The card shows it now.
    assert "Please cancel the refund, it works again now." in unescape(response.content.decode())
    _nothing_decided(approval)
    advance(ticket.pk)
    assert provider_refunds(sandbox, approval.ticket.customer.orders.get()) == []


def test_an_approval_from_a_form_without_what_its_card_showed_of_the_provider_is_handed_back(
    sandbox,  # noqa: ANN001
    provider,  # noqa: ANN001
    client,  # noqa: ANN001
    approver,  # noqa: ANN001
):
    customer = make_customer()
    order = make_order(customer, number="F-1005", total_cents=60000)
    sandbox.seed_payment(order.payment_reference, order.total_cents, order.currency)
    _dashboard_refund(provider, order, 30000, "dashboard-f1005")
    ticket, _ = ticket_services.ticket_open(
        customer=customer, subject="Refund", body="Please refund $300 of order F-1005, it arrived broken"
    )
    assert advance(ticket.pk).state == RunStatus.WAITING_APPROVAL
    approval = ApprovalRequest.objects.get(ticket=ticket, status=ApprovalStatus.PENDING)
    assert approval.evidence.get("provider", {}).get("read"), approval.evidence  # read after the request
    client.force_login(approver)

    # A form that does not carry what its card showed of the provider: it showed nothing, as far as anyone knows.
    form = {"decision": "approve", "confirm_amount": str(approval.amount_cents), "note": ""}
    assert client.post(f"/staff/approvals/{approval.pk}/decide/", form).status_code == 302

    assert advance(ticket.pk).state == RunStatus.WAITING_APPROVAL
    assert _paid_at_the_provider(sandbox, order.payment_reference) == [30000], (
        "the refund was paid on top of the $300 at the provider, which nothing says its card showed"
    )
    again = ApprovalRequest.objects.get(ticket=ticket, status=ApprovalStatus.PENDING)
    assert "$300.00" in again.reason, again.reason
