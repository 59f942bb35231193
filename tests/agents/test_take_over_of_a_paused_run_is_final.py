"""A take-over of a ticket whose run waits (for staff or the customer's Confirm) is final for that run,
whether or not a worker ended the run before the hand-back.

README, "A person's decision ends the agent's part": taking a ticket over ends the agent's run on it
at once; a Confirm or an Approve pressed afterwards is refused (409, nothing changed), and "Nothing
of it is paid later". The person takes the ticket over and hands it back before any worker took the
take-over's doorbell (workers restarting in a deploy, a backlog): the refund they stopped stays
stopped; only a run in the middle of a step is given back by a hand-back.
"""

from __future__ import annotations

import pytest

from agents.models import CallStatus
from agents.runner import advance
from approvals import services as approval_services
from approvals.models import ApprovalRequest
from tests.agents.test_money_gates import confirm, refund_calls
from tests.agents.test_money_path import order_for, paid
from tests.approvals.conftest import make_staff
from tests.conftest import make_customer
from tickets import services as ticket_services

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.timeout(120),
    pytest.mark.usefixtures("quick_provider_retries"),
]


@pytest.mark.customer_confirms
def test_a_refund_stopped_by_a_take_over_is_not_paid_after_a_quick_hand_back(sandbox, person):  # noqa: ANN001
    customer = make_customer()
    order = order_for(customer, "R-2101", 5000, sandbox)
    ticket, _ = ticket_services.ticket_open(
        customer=customer, subject="Refund", body="Please refund $50.00 on order R-2101"
    )
    advance(ticket.pk)  # the offline model asks the customer to confirm the refund
    (call,) = refund_calls(ticket)
    assert call.status == CallStatus.AWAITING_CONFIRMATION

    # A person takes the ticket over (the refund is stopped) and hands it back a moment later; no
    # worker took the take-over's doorbell in between.
    ticket_services.ticket_take_over(ticket=ticket, user=person)
    ticket_services.ticket_hand_back(ticket=ticket, user=person)

    status = confirm(ticket, call)
    advance(ticket.pk)
    assert paid(sandbox, order) == [], (
        f"the refund a person stopped by taking the ticket over was paid on a later Confirm (HTTP {status})"
    )
    assert status == 409


def test_an_approval_of_a_refund_stopped_by_a_take_over_pays_nothing_after_a_quick_hand_back(sandbox, person):  # noqa: ANN001
    approver = make_staff("approver-of-the-stopped", can_decide=True)
    customer = make_customer()
    order = order_for(customer, "R-2102", 64900, sandbox)
    ticket, _ = ticket_services.ticket_open(
        customer=customer, subject="Refund", body="Please refund $649.00 on order R-2102"
    )
    advance(ticket.pk)  # above the threshold: waits for staff
    (call,) = refund_calls(ticket)
    assert call.status == CallStatus.AWAITING_APPROVAL

    ticket_services.ticket_take_over(ticket=ticket, user=person)
    ticket_services.ticket_hand_back(ticket=ticket, user=person)

    approval = ApprovalRequest.objects.get(ticket=ticket)
    refused = None
    try:
        approval_services.approval_decide(approval_id=approval.pk, user=approver, approve=True)
    except Exception as exc:  # noqa: BLE001 - the refusal (a conflict) is what a fixed product does
        refused = exc
    advance(ticket.pk)
    assert paid(sandbox, order) == [], f"paid after the take-over ended the run (approve refused: {refused!r})"
