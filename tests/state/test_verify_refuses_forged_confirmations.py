"""A bundle whose refund reads as confirmed by a customer who never pressed Confirm is refused.

Nothing is paid until the customer presses Confirm (README, "The customer confirms, last"). A call
waiting for that answer, edited to read "confirmed" (the edited part's digest rewritten, so the
checksums hold), passed ``verify`` and ``restore``; the new deployment's agent then paid the refund
the customer had not confirmed.
"""

from __future__ import annotations

import pytest
from django.core.management.base import CommandError
from django.test import Client

from agents.models import CallStatus, Refund, RunStatus, ToolCall
from agents.runner import advance
from tests.state.conftest import export, rewrite_part, verify
from tests.state.test_bundle import customer_with_paid_order, empty_the_ledger, restore
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

    status, out = verify(path)
    empty_the_ledger()
    try:
        restore(path)
    except CommandError as refused:
        assert "confirm" in str(refused)
        assert status == 1 and "no call carries a confirmation its customer did not give" in out, out
        return
    advance(ticket.pk)
    assert not Refund.objects.exists(), (
        "a bundle whose refund question was edited to read confirmed passed verify "
        f"(exit {status}) and restore, and the agent paid it without the customer's Confirm: "
        f"{list(Refund.objects.values_list('amount_cents', 'status'))}"
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
