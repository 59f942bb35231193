"""``restore_state --on-conflict=skip`` never drops what the bundle holds of a ticket this database has
in an older state.

Moving in steps (a first bundle, then another carrying the same ticket for its refunds or chosen
again) meets a ticket already here; skipping it is right only when this database holds every row the
bundle has of it. A ticket here as it was at an earlier bundle, without a refund paid since, would keep
its order refundable again on this deployment: the paid refund was dropped with the skipped ticket.
"""

from __future__ import annotations

import pytest
from django.core.management.base import CommandError

from agents.models import Refund
from agents.runner import advance
from agents.selectors import refunded_total_cents
from tests.conftest import make_order
from tests.state.conftest import export
from tests.state.test_bundle import ask, customer_with_paid_order, empty_the_ledger, restore
from tickets import services as ticket_services
from tickets.models import Order

pytestmark = [pytest.mark.django_db, pytest.mark.timeout(120)]


def test_skip_does_not_drop_a_refund_paid_since_this_database_got_the_ticket(tmp_path, sandbox):
    customer, _ = customer_with_paid_order(sandbox, "S-8118", 4999)
    order = make_order(customer, number="S-8119", total_cents=4999)
    sandbox.seed_payment(order.payment_reference, order.total_cents, order.currency)
    ticket = ask(customer, "Please refund $20 on order S-8118")
    first = export(tmp_path, ticket, name="first", include_personal_data=True)

    # The ticket goes on where it was exported from: the customer's other order is refunded there.
    ticket_services.message_post(ticket=ticket.pk, author_kind="customer", body="Please refund $10 on order S-8119")
    advance(ticket.pk)
    assert refunded_total_cents(order) == 1000
    second = export(tmp_path, ticket, name="second", include_personal_data=True)

    # The new deployment got the first bundle, then the second, skipping what it already has.
    empty_the_ledger()
    restore(first)
    try:
        restore(second, on_conflict="skip")
    except CommandError as refused:
        assert f"ticket #{ticket.pk} is here without rows the bundle has of it" in str(refused)
        assert not Refund.objects.filter(order_id=order.pk).exists()  # nothing of the second bundle written
        return

    restored = Order.objects.get(pk=order.pk)
    assert refunded_total_cents(restored) == 1000, (
        "the second bundle's ticket was skipped as already here, and the refund paid on order S-8119 since "
        f"the first bundle went with it: this deployment counts {refunded_total_cents(restored)} cents refunded "
        "on the order, the payment provider paid 1000, and the order can be refunded again in full"
    )
