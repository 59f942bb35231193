"""An approval request whose ticket a person took over is withdrawn, not expired, whenever the
expiry sweep runs.

README, "A person's decision ends the agent's part": a take-over withdraws the agent's cards. If
the sweep that expires overdue requests ran after the take-over but before a worker ended the run
(the take-over's doorbell slow or lost), it wrote "expired" over the person's stop, and told the
customer "We could not review your request in time." on a ticket a person holds. It now leaves
such a request to the run's end, as a staff decision would be refused there.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from agents.models import CallStatus
from agents.runner import advance
from approvals import services as approval_services
from approvals.models import ApprovalRequest, ApprovalStatus
from tests.agents.test_money_gates import Refunds, refund_calls
from tests.agents.test_money_path import order_for, paid
from tests.approvals.conftest import make_staff
from tests.conftest import make_customer
from tickets import services as ticket_services
from tickets.models import TicketEvent

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(120)]


def test_the_expiry_sweep_after_a_take_over_leaves_the_request_to_be_withdrawn(sandbox):  # noqa: ANN001
    person = make_staff("takes-over", can_decide=False)
    customer = make_customer()
    order = order_for(customer, "PV-1001", 50000, sandbox)
    ticket, _ = ticket_services.ticket_open(customer=customer, subject="Refund", body="Refund PV-1001")
    model = Refunds(("PV-1001", 25000))
    advance(ticket.pk, model=model)  # above the threshold: waits for staff
    approval = ApprovalRequest.objects.get(ticket=ticket)

    ticket_services.ticket_take_over(ticket=ticket.pk, user=person)
    counts = approval_services.approvals_expire_due(now=timezone.now() + timedelta(days=30))
    approval.refresh_from_db()
    assert counts["expired"] == 0 and approval.status == ApprovalStatus.PENDING

    advance(ticket.pk, model=model)  # the pass that ends the run for the person

    approval.refresh_from_db()
    assert approval.status == ApprovalStatus.WITHDRAWN, approval.status
    assert not TicketEvent.objects.filter(ticket=ticket, kind="approval_expired").exists()
    assert paid(sandbox, order) == []
    [call] = refund_calls(ticket)
    assert call.status == CallStatus.FAILED and call.approval_decision is None, (call.status, call.approval_decision)


def test_a_request_with_no_person_on_the_ticket_still_expires(sandbox):  # noqa: ANN001
    customer = make_customer()
    order = order_for(customer, "PV-1002", 50000, sandbox)
    ticket, _ = ticket_services.ticket_open(customer=customer, subject="Refund", body="Refund PV-1002")
    advance(ticket.pk, model=Refunds(("PV-1002", 25000)))

    counts = approval_services.approvals_expire_due(now=timezone.now() + timedelta(days=30))

    assert counts["expired"] == 1
    assert ApprovalRequest.objects.get(ticket=ticket).status == ApprovalStatus.EXPIRED
    assert TicketEvent.objects.filter(ticket=ticket, kind="approval_expired", is_public=True).count() == 1
    assert paid(sandbox, order) == []


def test_no_reminder_of_a_request_whose_ticket_a_person_took(sandbox):  # noqa: ANN001
    """The dashboard no longer offers such a request (the run's end withdraws it): reminding staff of it
    wrote "Staff were reminded of a request close to its expiry" on a ticket a person holds, and rang
    the dashboards for a card they do not show."""
    person = make_staff("takes-over-too", can_decide=False)
    customer = make_customer()
    order_for(customer, "PV-1003", 50000, sandbox)
    ticket, _ = ticket_services.ticket_open(customer=customer, subject="Refund", body="Refund PV-1003")
    advance(ticket.pk, model=Refunds(("PV-1003", 25000)))
    approval = ApprovalRequest.objects.get(ticket=ticket)
    ticket_services.ticket_take_over(ticket=ticket.pk, user=person)

    counts = approval_services.approvals_expire_due(now=approval.expires_at - timedelta(hours=1))

    approval.refresh_from_db()
    assert approval.status == ApprovalStatus.PENDING and approval.reminder_sent_at is None
    assert counts["reminded"] == 0, counts
    assert not TicketEvent.objects.filter(ticket=ticket, kind="approval_reminder").exists()
