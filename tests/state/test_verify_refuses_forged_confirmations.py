"""A bundle whose refund reads as confirmed by a customer who never pressed Confirm is refused.

Nothing is paid until the customer presses Confirm (README, "The customer confirms, last"). A call
waiting for that answer, edited to read "confirmed" (the edited part's digest rewritten, so the
checksums hold), passed ``verify`` and ``restore``; the new deployment's agent then paid the refund
the customer had not confirmed.
"""

from __future__ import annotations

import pytest
from django.test import Client

from agents.models import CallStatus, Refund, RunStatus, ToolCall
from agents.runner import advance
from approvals import services as approval_services
from approvals.models import ApprovalRequest
from tests.approvals.conftest import make_staff
from tests.state.conftest import export, rewrite_part, verify
from tests.state.test_bundle import customer_with_paid_order, edited_bundle_pays_nothing
from tickets import services as ticket_services

pytestmark = [pytest.mark.django_db, pytest.mark.timeout(120), pytest.mark.customer_confirms]


def _confirmed_by_nobody(rows: list[dict]) -> list[dict]:
    return [
        {**r, "confirmation_decision": "confirmed"} if r["status"] == CallStatus.AWAITING_CONFIRMATION else r
        for r in rows
    ]


def test_a_refund_waiting_for_the_customers_confirm_edited_to_read_confirmed_is_reported_and_not_restored(
    tmp_path, sandbox
):
    customer, _ = customer_with_paid_order(sandbox, "Q-5501", 4999)
    ticket, _ = ticket_services.ticket_open(customer=customer, subject="Refund", body="Please refund order Q-5501")
    assert advance(ticket.pk).state == RunStatus.WAITING_CONFIRMATION
    path = export(tmp_path, ticket, include_personal_data=True)
    assert verify(path)[0] == 0
    rewrite_part(path, "agents.ToolCall", _confirmed_by_nobody)

    edited_bundle_pays_nothing(
        path,
        ticket,
        refused_for="confirm",
        verify_says="no call carries a confirmation its customer did not give",
        edited="refund question was edited to read confirmed",
    )


def test_a_refund_the_customer_confirmed_with_the_button_and_was_paid_passes_verify(tmp_path, sandbox):
    customer, _ = customer_with_paid_order(sandbox, "Q-5502", 4999)
    ticket, _ = ticket_services.ticket_open(customer=customer, subject="Refund", body="Please refund order Q-5502")
    assert advance(ticket.pk).state == RunStatus.WAITING_CONFIRMATION
    call = ToolCall.objects.get(ticket=ticket, name="issue_refund")
    client = Client()
    client.force_login(customer.user)
    response = client.post(
        f"/tickets/{ticket.pk}/confirmations/{call.pk}",
        {"answer": "confirm", "digest": call.confirmation_digest},
        content_type="application/json",
    )
    assert response.status_code == 200, response.json()
    advance(ticket.pk)
    assert Refund.objects.get(ticket=ticket).status == "succeeded"

    for personal_data in (True, False):
        path = export(tmp_path, ticket, name=f"bundle-{personal_data}", include_personal_data=personal_data)
        status, out = verify(path)
        assert status == 0, out


def _never_asked(rows: list[dict]) -> list[dict]:
    unasked = {"confirmation_required": False, "confirmation_text": "", "confirmation_expires_at": None}
    return [
        {**r, **unasked, "status": CallStatus.STARTED, "confirmation_digest": ""}
        if r["status"] == CallStatus.AWAITING_CONFIRMATION
        else r
        for r in rows
    ]


def _running(rows: list[dict]) -> list[dict]:
    return [{**r, "status": RunStatus.RUNNING} if r["status"] == RunStatus.WAITING_CONFIRMATION else r for r in rows]


def test_a_refund_waiting_for_the_customers_confirm_edited_to_run_unasked_is_reported_and_not_restored(
    tmp_path, sandbox
):
    """The same refund edited instead to read as one recorded to run that was never to be asked (its
    run running again): the question the rules it was recorded under ask is skipped, not answered."""
    customer, _ = customer_with_paid_order(sandbox, "Q-5503", 4999)
    ticket, _ = ticket_services.ticket_open(customer=customer, subject="Refund", body="Please refund order Q-5503")
    assert advance(ticket.pk).state == RunStatus.WAITING_CONFIRMATION
    path = export(tmp_path, ticket, include_personal_data=True)
    assert verify(path)[0] == 0
    rewrite_part(path, "agents.ToolCall", _never_asked)
    rewrite_part(path, "agents.AgentRun", _running)

    edited_bundle_pays_nothing(
        path,
        ticket,
        refused_for="Confirm",
        verify_says="no refund still to run skips the customer's Confirm its rules ask",
        edited="refund question was edited away",
    )


def test_a_refund_asked_after_its_approval_passes_verify_at_each_pause_and_once_paid(tmp_path, sandbox):
    """With the customer's Confirm on, a refund above the threshold waits for staff, then for the customer,
    then is paid: a bundle written at any of these moments is whole."""
    customer, _ = customer_with_paid_order(sandbox, "Q-5504", 45000)
    ticket, _ = ticket_services.ticket_open(customer=customer, subject="Refund", body="Please refund order Q-5504")
    assert advance(ticket.pk).state == RunStatus.WAITING_APPROVAL
    status, out = verify(export(tmp_path, ticket, name="waiting-for-staff", include_personal_data=True))
    assert status == 0, out

    approval_services.approval_decide(
        approval_id=ApprovalRequest.objects.get(ticket=ticket).pk,
        user=make_staff("approves", can_decide=True),
        approve=True,
    )
    assert advance(ticket.pk).state == RunStatus.WAITING_CONFIRMATION
    status, out = verify(export(tmp_path, ticket, name="waiting-for-the-customer", include_personal_data=True))
    assert status == 0, out

    call = ToolCall.objects.get(ticket=ticket, name="issue_refund")
    client = Client()
    client.force_login(customer.user)
    response = client.post(
        f"/tickets/{ticket.pk}/confirmations/{call.pk}",
        {"answer": "confirm", "digest": call.confirmation_digest},
        content_type="application/json",
    )
    assert response.status_code == 200, response.json()
    advance(ticket.pk)
    assert Refund.objects.get(ticket=ticket).status == "succeeded"
    status, out = verify(export(tmp_path, ticket, name="paid", include_personal_data=True))
    assert status == 0, out
