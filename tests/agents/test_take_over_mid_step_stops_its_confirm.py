"""A take-over that lands while the model writes a step asking the customer to confirm a refund stops
that refund, even if the person hands the ticket back before any worker noticed.

README, "A person's decision ends the agent's part": "a take-over that lands while the model is
still writing a step stops that step's refund too", and nothing of it is paid later. The run
paused (its step stored) while a person had the ticket: it is stopped for good, and the customer's
Confirm afterwards is refused. The question is not shown to the customer at all.
"""

from __future__ import annotations

import pytest

from agents.models import CallStatus, Refund, RefundStatus
from agents.runner import advance
from tests.agents.test_money_gates import confirm, refund_calls
from tests.agents.test_money_path import order_for, paid
from tests.agents.test_refund_stopped_mid_step import RefundWhenAsked
from tests.conftest import make_customer
from tickets import services as ticket_services
from tickets.models import TicketEvent

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.timeout(120),
    pytest.mark.usefixtures("quick_provider_retries"),
]


@pytest.mark.customer_confirms
def test_a_take_over_while_the_step_is_written_stops_its_confirm_even_after_a_quick_hand_back(sandbox, person):  # noqa: ANN001
    customer = make_customer()
    order = order_for(customer, "RV-2201", 5000, sandbox)  # $50.00: under every threshold
    ticket, _ = ticket_services.ticket_open(
        customer=customer, subject="Refund", body="Please refund $50.00 on order RV-2201"
    )

    # A person takes the ticket over while the model writes the step that asks for the refund.
    model = RefundWhenAsked(
        "RV-2201", 5000, meanwhile=lambda: ticket_services.ticket_take_over(ticket=ticket.pk, user=person)
    )
    advance(ticket.pk, model=model)
    (call,) = refund_calls(ticket)
    # The customer is not shown a question nobody will act on (nor told later it was withdrawn).
    shown = TicketEvent.objects.filter(ticket=ticket, kind__startswith="confirmation_", is_public=True)
    assert list(shown.values_list("kind", flat=True)) == []

    # The person hands it back a moment later, before a worker took the take-over's ring.
    ticket_services.ticket_hand_back(ticket=ticket.pk, user=person)

    status = confirm(ticket, call) if call.status == CallStatus.AWAITING_CONFIRMATION else None
    advance(ticket.pk, model=model)
    call.refresh_from_db()
    succeeded = Refund.objects.filter(order=order, status=RefundStatus.SUCCEEDED).exists()
    assert not shown.exists()
    assert paid(sandbox, order) == [] and not succeeded, (
        "the refund of a step a person took the ticket over in was paid after a quick hand-back, "
        f"unreviewed, on the customer's Confirm (HTTP {status}); call {call.status}: {call.error!r}"
    )
