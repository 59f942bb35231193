"""A customer's question and a staff approval expire on the database's clock, not each host's.

Their expiry was written with the clock of the worker that asked and compared with the clock of
whichever host swept or answered: with one clock off (as tests/agents/test_lease_clock.py and
test_backoff_clock.py, 90 s there), a sweeper running ahead expired a question the customer had just
been asked, or an approval staff had just been given, and a worker running ahead gave them longer
than their time. Both are now set and compared on the database's clock, as the lease and backoffs are.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from agents.confirmation import confirmations_expire_due
from agents.models import CallStatus
from agents.runner import advance
from approvals import services as approval_services
from approvals.models import ApprovalRequest, ApprovalStatus
from tests.agents.test_backoff_clock import on_a_host_whose_clock_is_off
from tests.agents.test_confirmation import ask_for_refund, question
from tests.agents.test_money_gates import Refunds
from tests.agents.test_money_path import order_for
from tests.conftest import make_customer
from tickets import services as ticket_services

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(120)]

AHEAD = timedelta(hours=2)  # past a 30-minute question, not a 24-hour approval


@pytest.mark.customer_confirms
@pytest.mark.usefixtures("quick_provider_retries")
def test_a_question_just_asked_is_not_expired_by_a_sweeper_whose_clock_runs_ahead(sandbox, monkeypatch):  # noqa: ANN001
    _, _, ticket = ask_for_refund(sandbox)
    assert question(ticket).status == CallStatus.AWAITING_CONFIRMATION

    on_a_host_whose_clock_is_off(monkeypatch, AHEAD)
    assert confirmations_expire_due() == 0
    assert question(ticket).status == CallStatus.AWAITING_CONFIRMATION


@pytest.mark.customer_confirms
@pytest.mark.usefixtures("quick_provider_retries")
def test_a_question_asked_by_a_worker_whose_clock_runs_ahead_expires_on_time(sandbox, monkeypatch):  # noqa: ANN001
    back = on_a_host_whose_clock_is_off(monkeypatch, AHEAD)
    _, _, ticket = ask_for_refund(sandbox)
    back()
    call = question(ticket)
    left = call.confirmation_expires_at - timezone.now()
    assert timedelta(minutes=25) < left <= timedelta(minutes=30), f"the question was given {left}"


def test_an_approval_just_asked_is_not_expired_by_a_sweeper_whose_clock_runs_ahead(sandbox, monkeypatch):  # noqa: ANN001
    customer = make_customer()
    order_for(customer, "DK-1001", 50000, sandbox)
    ticket, _ = ticket_services.ticket_open(customer=customer, subject="Refund", body="Refund DK-1001")
    advance(ticket.pk, model=Refunds(("DK-1001", 25000)))  # above the threshold: waits for staff
    approval = ApprovalRequest.objects.get(ticket=ticket)
    hours = (approval.expires_at - timezone.now()) / timedelta(hours=1)

    on_a_host_whose_clock_is_off(monkeypatch, timedelta(hours=hours + 1))
    counts = approval_services.approvals_expire_due()

    approval.refresh_from_db()
    assert counts["expired"] == 0 and approval.status == ApprovalStatus.PENDING
