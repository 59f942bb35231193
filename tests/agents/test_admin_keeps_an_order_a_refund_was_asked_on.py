"""An order a refund was asked for on (a refund waiting for a staff approval, or the customer's
Confirm, has no refund row yet) cannot be deleted from the admin, from its page or the order list:
the ticket's tool call and approval request name it by its number, and deleted (its lines with it)
they named an order that no longer exists. (With a refund row, the refund's PROTECT already kept
it.) An order nothing asked money on can still be deleted.
"""

from __future__ import annotations

import pytest

from agents.models import Refund, ToolCall
from agents.runner import advance
from approvals.models import ApprovalRequest, ApprovalStatus
from tests.conftest import make_customer, make_order
from tickets import services as ticket_services
from tickets.models import Order, OrderLine

pytestmark = pytest.mark.django_db(transaction=True)


def test_an_order_with_a_refund_waiting_for_approval_is_not_deleted(admin_client):
    customer = make_customer()
    order = make_order(customer, total_cents=64900, number="K-1001")
    ticket, _ = ticket_services.ticket_open(
        customer=customer, subject="Refund", body="Please refund my order K-1001, it stopped working"
    )
    advance(ticket.pk)
    assert ApprovalRequest.objects.get(ticket=ticket).status == ApprovalStatus.PENDING
    assert not Refund.objects.filter(order=order).exists()

    page = admin_client.post(f"/admin/tickets/order/{order.pk}/delete/", {"post": "yes"})
    listed = admin_client.post(
        "/admin/tickets/order/", {"action": "delete_selected", "_selected_action": [order.pk], "post": "yes"}
    )
    asked = admin_client.get(f"/admin/tickets/order/{order.pk}/delete/")

    assert Order.objects.filter(pk=order.pk).exists() and OrderLine.objects.filter(order=order).exists()
    assert ToolCall.objects.filter(ticket=ticket, name="issue_refund").exists()
    assert page.status_code == 403 and listed.status_code == 403
    assert "a refund was asked for on" in asked.content.decode()


def test_an_order_nothing_asked_money_on_can_still_be_deleted(admin_client):
    order = make_order(make_customer())

    admin_client.post(f"/admin/tickets/order/{order.pk}/delete/", {"post": "yes"})

    assert not Order.objects.filter(pk=order.pk).exists()
