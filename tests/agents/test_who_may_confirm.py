"""Only the ticket's customer presses Confirm on a refund, whoever else holds a session.

A superuser (every permission, staff of the shop) is not the customer: their Confirm on the
customer's question is refused as anyone else's (404), and nothing is paid. Another customer who
has a question of their own cannot answer someone else's through their own ticket's address
(their ticket, the other's question): refused, nothing recorded on either, nothing paid. The
question is still open for its customer, whose Confirm pays it once.

Each test reads the payment sandbox's own records (a separate process, over HTTP).
"""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from agents.runner import advance
from tests.agents.test_confirmation import answer, ask_for_refund, question, signed_in
from tests.agents.test_money_path import paid

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.customer_confirms,
    pytest.mark.timeout(120),
    pytest.mark.usefixtures("quick_provider_retries"),
]


def test_neither_a_superuser_nor_another_customer_can_press_confirm_for_the_customer(sandbox):  # noqa: ANN001
    alice, order, ticket = ask_for_refund(sandbox, number="W-7101")
    bob, bobs_order, bobs_ticket = ask_for_refund(sandbox, number="W-7102")
    call, bobs_call = question(ticket), question(bobs_ticket)
    assert call.confirmation_text and bobs_call.confirmation_text

    boss = Client()
    boss.force_login(get_user_model().objects.create_superuser("boss", "boss@example.test", "boss-pass-123"))
    by_the_boss = answer(boss, ticket, call, "confirm")
    # Bob's own ticket in the address, Alice's question in it.
    crossed = signed_in(bob).post(
        f"/tickets/{bobs_ticket.pk}/confirmations/{call.pk}",
        {"answer": "confirm", "digest": call.confirmation_digest},
        content_type="application/json",
    )
    advance(ticket.pk)
    advance(bobs_ticket.pk)

    assert paid(sandbox, order) == [] and paid(sandbox, bobs_order) == []
    assert by_the_boss.status_code == 404
    assert crossed.status_code == 404 and crossed.json()["code"] == "not_found"
    call.refresh_from_db()
    bobs_call.refresh_from_db()
    assert call.confirmation_decision is None and bobs_call.confirmation_decision is None

    assert answer(signed_in(alice), ticket, call, "confirm").status_code == 200
    advance(ticket.pk)
    assert [r["amount"] for r in paid(sandbox, order)] == [4999]
    assert paid(sandbox, bobs_order) == []
