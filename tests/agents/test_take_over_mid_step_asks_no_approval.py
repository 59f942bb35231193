"""A refund that needs a staff approval, asked in a step the model wrote while a person took the ticket
over, is not put to staff nor announced to the customer.

README, "A person's decision ends the agent's part": while a person has the ticket the agent says
nothing, and a request a person stopped cannot be decided. The step was stored and its refund paused
for an approval all the same: the customer, just told "A person from our team has joined", read
"Your refund request is under review by our team." after it, from the agent, and the dashboards got a
card that any decision on is refused ("A person has had ticket #N since the agent asked"). The pause
is still recorded (the pass that follows ends the run and closes the request), as a Confirm question
asked in such a step is, without showing it.
"""

from __future__ import annotations

import pytest

from agents.models import AgentRun, RunStatus
from agents.runner import advance
from approvals import selectors as approval_selectors
from approvals.models import ApprovalRequest, ApprovalStatus
from tests.agents.test_money_path import order_for, paid
from tests.agents.test_refund_stopped_mid_step import RefundWhenAsked
from tests.conftest import make_customer
from tickets import services as ticket_services
from tickets.models import TicketEvent

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(120)]


def test_a_request_asked_while_a_person_took_the_ticket_reaches_neither_the_customer_nor_the_dashboard(
    sandbox,
    person,  # noqa: ANN001
):
    customer = make_customer()
    order = order_for(customer, "RV-3301", 64900, sandbox)
    ticket, _ = ticket_services.ticket_open(customer=customer, subject="Refund", body="Refund $649.00 on RV-3301")
    model = RefundWhenAsked(
        "RV-3301", 64900, meanwhile=lambda: ticket_services.ticket_take_over(ticket=ticket.pk, user=person)
    )

    advance(ticket.pk, model=model)

    told = TicketEvent.objects.filter(ticket=ticket, kind="approval_requested", is_public=True)
    assert list(told.values_list("payload__label", flat=True)) == []
    assert list(approval_selectors.approvals_pending().filter(ticket=ticket)) == []

    advance(ticket.pk, model=model)  # the take-over's ring: the run ends for the person
    assert AgentRun.objects.get(ticket=ticket).status == RunStatus.HANDED_OFF
    assert not ApprovalRequest.objects.filter(ticket=ticket, status=ApprovalStatus.PENDING).exists()
    assert paid(sandbox, order) == []
