"""A Confirm pressed as beat expires the question is answered: "This question has expired", never a
server error.

The customer's answer locks the question's call, then holds the ticket (the order the agent and a
staff decision take them in: call, then ticket). The expiry sweep held the ticket first and then wrote
the call: a Confirm arriving in that moment held the call and waited for the ticket while the sweep
waited for the call, and PostgreSQL broke the deadlock by failing the customer's request (a 500, the
chat's "Not sent"), or the sweep's row.
"""

from __future__ import annotations

import threading
import time
from datetime import timedelta

import pytest
from django.db import connection
from django.test import Client
from django.utils import timezone

from agents.confirmation import confirmations_expire_due
from agents.models import CallStatus, ConfirmationDecision, ToolCall
from agents.runner import advance
from tests.agents.test_money_path import order_for, paid, public_words
from tests.conftest import make_customer
from tickets import services as ticket_services

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.customer_confirms,
    pytest.mark.timeout(120),
    pytest.mark.usefixtures("quick_provider_retries"),
]


def _waiting_for_a_lock() -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_locks WHERE NOT granted")
        return cursor.fetchone()[0]


def test_a_confirm_pressed_while_the_sweep_expires_the_question_is_told_it_expired(sandbox):  # noqa: ANN001
    customer = make_customer()
    order = order_for(customer, "X-7101", 4999, sandbox)
    ticket, _ = ticket_services.ticket_open(customer=customer, subject="Refund", body="Please refund order X-7101")
    advance(ticket.pk)
    call = ToolCall.objects.get(ticket=ticket, name="issue_refund")
    assert call.status == CallStatus.AWAITING_CONFIRMATION and call.confirmation_text
    # The question's time is up; beat's sweep and the customer's Confirm arrive together.
    ToolCall.objects.filter(pk=call.pk).update(confirmation_expires_at=timezone.now() - timedelta(seconds=1))

    answers: list = []

    def customer_presses_confirm() -> None:
        try:
            client = Client(raise_request_exception=False)
            client.force_login(customer.user)
            answers.append(
                client.post(
                    f"/tickets/{ticket.pk}/confirmations/{call.pk}",
                    {"answer": "confirm", "digest": call.confirmation_digest},
                    content_type="application/json",
                )
            )
        finally:
            connection.close()

    pressed = threading.Thread(target=customer_presses_confirm)
    inside = threading.local()

    def confirm_lands_as_the_sweep_holds_the_ticket(execute, sql, params, many, context):  # noqa: ANN001, ANN202
        result = execute(sql, params, many, context)
        if getattr(inside, "polling", False) or pressed.is_alive() or answers:
            return result
        if '"tickets_ticket"' in sql and "FOR NO KEY UPDATE" in sql:
            pressed.start()
            inside.polling = True
            try:
                deadline = time.monotonic() + 10
                while time.monotonic() < deadline and not _waiting_for_a_lock():
                    time.sleep(0.02)
            finally:
                inside.polling = False
        return result

    with connection.execute_wrapper(confirm_lands_as_the_sweep_holds_the_ticket):
        expired = confirmations_expire_due()
    pressed.join(30)
    assert not pressed.is_alive()

    (response,) = answers
    assert response.status_code == 409, (response.status_code, response.content[:300])
    assert response.json()["code"] == "expired"
    assert expired == 1
    call.refresh_from_db()
    assert call.confirmation_decision == ConfirmationDecision.EXPIRED
    advance(ticket.pk)
    assert paid(sandbox, order) == []
    assert any("did not confirm in time, so nothing was done" in w for w in public_words(ticket))
