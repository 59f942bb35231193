"""A person's stop of a refund is kept when the question's time runs out after the take-over.

README ("Refunds: the rules"): asking again for a refund a person stopped (took the ticket over while
it waited to be paid) is reviewed by staff; a question the customer cancelled or let expire is not a
person's stop. Here a person takes the ticket over while the refund waits for the customer's Confirm
(a deploy: no worker picks the take-over up for a moment), and the question's time runs out before
a worker ends the run: beat leaves it to the run's end (as a customer's Cancel is refused after a
take-over), so the stop counts and the same refund asked again is reviewed.
"""

from __future__ import annotations

import pytest

from agents.confirmation import confirmations_expire_due
from agents.models import CallStatus, ToolCall
from agents.runner import advance
from tests.agents.test_money_gates import refund_calls
from tests.agents.test_money_path import order_for
from tests.agents.test_refund_a_person_stopped_matrix import AsksForTheRefund
from tests.conftest import make_customer
from tickets import services as ticket_services

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.timeout(120),
    pytest.mark.usefixtures("quick_provider_retries"),
    pytest.mark.customer_confirms,
]


def test_a_take_over_before_the_question_expired_is_still_a_persons_stop(sandbox, person):  # noqa: ANN001
    customer = make_customer()
    order_for(customer, "NP-3301", 5000, sandbox)  # $50.00: under every threshold
    words = "Please refund $50.00 on order NP-3301"
    ticket, _ = ticket_services.ticket_open(customer=customer, subject="Refund", body=words)
    model = AsksForTheRefund("NP-3301", 5000)
    advance(ticket.pk, model=model)
    (first,) = refund_calls(ticket)
    assert first.status == CallStatus.AWAITING_CONFIRMATION

    # A person reads the chat, does not like the refund and takes the ticket over (no worker up yet).
    ticket_services.ticket_take_over(ticket=ticket.pk, user=person)
    # The question's time runs out meanwhile: beat records "expired" before any worker ends the run.
    ToolCall.objects.filter(pk=first.pk).update(
        confirmation_expires_at=first.confirmation_expires_at.replace(year=2000)
    )
    assert confirmations_expire_due() == 0  # left to the run's end: a person has the ticket
    assert ToolCall.objects.get(pk=first.pk).confirmation_decision is None
    advance(ticket.pk, model=model)  # the worker is back: the run ends for the person
    first.refresh_from_db()
    ticket_services.ticket_hand_back(ticket=ticket.pk, user=person)
    advance(ticket.pk, model=model)

    again_ticket, _ = ticket_services.ticket_open(customer=customer, subject="Refund after all", body=words)
    advance(again_ticket.pk, model=model)
    (again,) = refund_calls(again_ticket)
    assert again.approval_required, (
        "a person took the ticket over while the refund waited for the customer's Confirm (before the question "
        "expired), yet asking again in a new ticket is not reviewed: the later 'expired' erased the person's stop; "
        f"first call {first.status}, decision {first.confirmation_decision}, error {first.error!r}; "
        f"second call {again.status}"
    )
