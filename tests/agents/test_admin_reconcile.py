"""The admin's reconcile action: offered to and done for staff who may change refunds, and each change it
makes names the member of staff who asked (invariant 10)."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Permission
from django.test import Client

from agents.models import Refund, RefundStatus
from agents.runner import advance
from tests.agents.test_money_gates import Refunds
from tests.agents.test_money_path import order_for
from tests.approvals.conftest import make_staff
from tests.conftest import make_customer
from tickets import services as ticket_services
from tickets.models import ActorKind, TicketEvent

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(120)]


def _paid_refund_left_uncertain(sandbox) -> Refund:  # noqa: ANN001
    customer = make_customer()
    order_for(customer, "R-3001", 5000, sandbox)
    ticket, _ = ticket_services.ticket_open(customer=customer, subject="Refund", body="Refund R-3001 please")
    advance(ticket.pk, model=Refunds(("R-3001", 1000)))
    refund = Refund.objects.get(ticket=ticket)
    assert refund.status == RefundStatus.SUCCEEDED
    # As a worker that died between the provider's answer and our commit leaves it.
    Refund.objects.filter(pk=refund.pk).update(status=RefundStatus.UNCERTAIN)
    return refund


def test_a_refund_settled_from_the_admins_reconcile_action_is_recorded_as_that_persons_doing(
    admin_client, admin_user, sandbox
):  # noqa: ANN001, E501
    refund = _paid_refund_left_uncertain(sandbox)
    before = TicketEvent.objects.filter(ticket_id=refund.ticket_id).count()

    response = admin_client.post(
        "/admin/agents/refund/", {"action": "reconcile_refunds", "_selected_action": [refund.pk]}
    )

    assert response.status_code == 302
    refund.refresh_from_db()
    assert refund.status == RefundStatus.SUCCEEDED
    new = list(TicketEvent.objects.filter(ticket_id=refund.ticket_id).order_by("seq")[before:])
    assert new, "the reconcile changed the refund and appended no event"
    assert [(e.kind, e.actor_kind, e.actor_user_id) for e in new] == [
        ("refund_succeeded", ActorKind.STAFF, admin_user.pk)
    ]


def test_staff_who_may_only_view_refunds_cannot_run_the_reconcile_action(sandbox):  # noqa: ANN001
    refund = _paid_refund_left_uncertain(sandbox)
    viewer = make_staff("refund-viewer", can_decide=False)
    viewer.user_permissions.add(Permission.objects.get(codename="view_refund"))
    client = Client()
    client.force_login(viewer)

    page = client.get("/admin/agents/refund/")
    assert page.status_code == 200
    client.post("/admin/agents/refund/", {"action": "reconcile_refunds", "_selected_action": [refund.pk]})

    refund.refresh_from_db()
    assert refund.status == RefundStatus.UNCERTAIN, "a view-only login changed a refund (and its ticket)"
