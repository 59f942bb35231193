"""The documented move (`export_state --all --open-only`) carries a finished ticket whose refund is
still pending at the provider: the new deployment's reconciler settles it and tells staff.

README, "Provider statuses": a `pending` refund stays open (the customer is told it is processing)
and the reconciler settles it; "Moving a deployment": the bundle moves tickets "with everything the
agent knows about them". A resolved ticket whose refund the bank has not settled yet is not open, and
its customer has no open ticket: were nothing of it bundled, no reconciler on the new deployment
would ask the provider about it, and when the bank failed the refund nobody would be told.
"""

from __future__ import annotations

import io

import pytest
from django.core.management import call_command

from agents.models import Refund, RefundStatus
from agents.refunds import reconcile_open_refunds
from agents.runner import advance
from tests.agents.test_money_path import order_for
from tests.approvals.conftest import make_staff
from tests.conftest import make_customer
from tests.state.test_bundle import empty_the_ledger, restore
from tickets import services as ticket_services

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(180)]


@pytest.fixture(autouse=True)
def _quick_retries(settings):  # noqa: ANN001, ANN202
    settings.REFUND_RETRY_FIRST_WAIT_MS = 5
    settings.REFUND_RETRY_MAX_WAIT_MS = 20


def test_a_move_of_the_open_tickets_carries_a_refund_still_pending_at_the_provider(sandbox, tmp_path):
    person = make_staff("ticket-person", can_decide=False)
    customer = make_customer()
    order_for(customer, "R-1801", 5000, sandbox)
    ticket, _ = ticket_services.ticket_open(
        customer=customer, subject="Refund", body="Please refund $30.00 on order R-1801"
    )
    sandbox.fault("refund_status:pending")  # the bank has not settled it yet
    advance(ticket.pk)
    pending = Refund.objects.get(ticket=ticket)
    assert pending.status == RefundStatus.PENDING
    ticket_services.ticket_resolve(ticket=ticket, user=person)  # the customer was told it is processing
    advance(ticket.pk)
    # Another customer's open ticket: the deployment has open work to move.
    someone = make_customer()
    ticket_services.ticket_open(customer=someone, subject="Parcel", body="Where is my parcel?")

    path = tmp_path / "open-tickets.tar"
    call_command(
        "export_state", all=True, open_only=True, include_personal_data=True, output=str(path), stdout=io.StringIO()
    )
    empty_the_ledger()
    restore(path)

    # The bank fails the refund after the move; the new deployment's reconciler runs.
    sandbox.settle_refund(pending.provider_refund_id, "failed")
    reconcile_open_refunds(older_than_seconds=0)

    assert Refund.objects.filter(provider_refund_id=pending.provider_refund_id).exists(), (
        "a refund still pending at the payment provider was left behind by the move (export_state --all "
        "--open-only): the new deployment's reconciler never settles it, and its failure reaches no one"
    )
