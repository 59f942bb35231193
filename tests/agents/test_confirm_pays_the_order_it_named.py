"""The customer's Confirm pays the order its question named, never another the same words name later.

The agent asks "Refund $49.99 to the card used for order M-100?" for the model's "m-100" (the
customer's only order of that number, in another case). Before the customer presses Confirm, the
shop records their order "m-100", exactly as the model wrote it, which the number now names. The
customer confirmed a refund on M-100: nothing is paid on m-100, and the model is told.

Each test reads the payment sandbox's own records (a separate process, over HTTP).
"""

from __future__ import annotations

import pytest

from agents.models import CallStatus
from agents.runner import advance
from tests.agents.test_confirmation import answer, question, signed_in
from tests.agents.test_money_gates import Refunds
from tests.agents.test_money_path import order_for, paid
from tests.conftest import make_customer
from tickets import services as ticket_services

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.customer_confirms,
    pytest.mark.timeout(120),
    pytest.mark.usefixtures("quick_provider_retries"),
]


def test_a_confirmed_refund_is_not_paid_on_an_order_the_question_did_not_name(sandbox):  # noqa: ANN001
    customer = make_customer()
    named = order_for(customer, "M-100", 4999, sandbox)
    ticket, _ = ticket_services.ticket_open(customer=customer, subject="Refund", body="Refund m-100")
    model = Refunds(("m-100", 4999))
    advance(ticket.pk, model=model)
    call = question(ticket)
    assert call.confirmation_text == "Refund $49.99 to the card used for order M-100?"

    other = order_for(customer, "m-100", 4999, sandbox)  # recorded by the shop while the question waited
    assert answer(signed_in(customer), ticket, call, "confirm").status_code == 200
    advance(ticket.pk, model=model)

    assert paid(sandbox, other) == [], "the customer confirmed M-100 and was refunded on m-100"
    assert paid(sandbox, named) == []  # the model is told, and asks the customer which order
    call.refresh_from_db()
    assert call.status == CallStatus.FAILED
    assert "now names order m-100, not the order the customer confirmed this refund for" in call.error
