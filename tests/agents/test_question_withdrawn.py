"""A question the customer can no longer answer loses its buttons.

README, "A person's decision ends the agent's part": a take-over closes what the run left waiting,
the customer's Confirm among it. The chat says so at once (a public ``confirmation_withdrawn``
event, which the open page applies live and a page loaded later shows): the customer is not left
with a Confirm button that can only be refused.
"""

from __future__ import annotations

import pytest
from django.test import Client

from agents.models import CallStatus
from agents.runner import advance
from tests.agents.test_money_gates import confirm, refund_calls
from tests.agents.test_money_path import order_for, paid
from tests.conftest import make_customer
from tickets import services as ticket_services
from tickets.models import TicketEvent

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(120)]


def _chat(ticket) -> str:  # noqa: ANN001
    client = Client()
    client.force_login(ticket.customer.user)
    return client.get(f"/tickets/{ticket.pk}/").content.decode()


def _question(page: str, call_id: int) -> str:
    start = page.index(f'data-call-id="{call_id}"')
    return page[start : page.index("</li>", start)]


@pytest.mark.customer_confirms
@pytest.mark.parametrize("pressed_confirm_first", [False, True])
def test_a_take_over_withdraws_the_question_in_the_chat(sandbox, person, pressed_confirm_first):  # noqa: ANN001
    customer = make_customer()
    order = order_for(customer, "W-1701", 5000, sandbox)
    ticket, _ = ticket_services.ticket_open(
        customer=customer, subject="Refund", body="Please refund $50.00 on order W-1701"
    )
    advance(ticket.pk)
    (call,) = refund_calls(ticket)
    assert call.status == CallStatus.AWAITING_CONFIRMATION
    assert 'data-answer="confirm">' in _question(_chat(ticket), call.pk)  # the buttons are there
    if pressed_confirm_first:
        assert confirm(ticket, call) == 200  # recorded; a take-over lands before a worker pays it

    ticket_services.ticket_take_over(ticket=ticket, user=person)
    advance(ticket.pk)  # the doorbell of the take-over: the run ends, its question is closed
    call.refresh_from_db()
    assert call.status == CallStatus.CANCELLED
    assert paid(sandbox, order) == []

    withdrawn = TicketEvent.objects.filter(ticket=ticket, kind="confirmation_withdrawn", is_public=True)
    assert [e.payload["call_id"] for e in withdrawn] == [call.pk], "the chat was not told the question is withdrawn"
    card = _question(_chat(ticket), call.pk)
    assert "disabled hidden>Confirm" in card and "This question was withdrawn, so nothing was done." in card, card


@pytest.mark.customer_confirms
def test_a_question_answered_cancel_is_not_said_withdrawn_again(sandbox, person):  # noqa: ANN001
    customer = make_customer()
    order_for(customer, "W-1702", 5000, sandbox)
    ticket, _ = ticket_services.ticket_open(
        customer=customer, subject="Refund", body="Please refund $50.00 on order W-1702"
    )
    advance(ticket.pk)
    (call,) = refund_calls(ticket)
    client = Client()
    client.force_login(customer.user)
    answer = client.post(
        f"/tickets/{ticket.pk}/confirmations/{call.pk}",
        {"answer": "cancel", "digest": call.confirmation_digest},
        content_type="application/json",
    )
    assert answer.status_code == 200
    ticket_services.ticket_take_over(ticket=ticket, user=person)
    advance(ticket.pk)
    assert not TicketEvent.objects.filter(ticket=ticket, kind="confirmation_withdrawn").exists()
    assert "You cancelled; nothing was done." in _question(_chat(ticket), call.pk)
