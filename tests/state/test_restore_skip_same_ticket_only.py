"""``restore_state --on-conflict=skip`` skips a bundled ticket only when the ticket here is that ticket.

Another customer's ticket that happens to have a bundled ticket's id is a conflict skipping cannot
settle: the restore is refused and nothing is written. (Dropping the bundle's ticket would drop the
refunds it carried for its order: the order would come back refundable again, and a second refund
on it would be paid without the review a second refund on one order needs.)
"""

from __future__ import annotations

import pytest
from django.core.management.base import CommandError
from django.db import connection

from agents.selectors import refunded_total_cents
from state.parts import PARTS
from tests.conftest import make_customer
from tests.state.conftest import export
from tests.state.test_bundle import ask, customer_with_paid_order, empty_the_ledger, restore
from tickets import services as ticket_services
from tickets.models import Order, Ticket

pytestmark = [pytest.mark.django_db, pytest.mark.timeout(120)]


def _sequences_far_away() -> None:
    """Another deployment: its own rows get ids far from the bundle's."""
    with connection.cursor() as cursor:
        for part in PARTS:
            if part.model._meta.pk.get_internal_type() in ("AutoField", "BigAutoField"):
                cursor.execute("SELECT setval(pg_get_serial_sequence(%s, 'id'), 100000)", [part.model._meta.db_table])


def test_skip_does_not_drop_a_bundled_ticket_because_another_customers_ticket_has_its_id(tmp_path, sandbox):
    customer, order = customer_with_paid_order(sandbox, "S-7117", 4999)
    earlier = ask(customer, "Please refund $20 on order S-7117")
    assert refunded_total_cents(order) == 2000
    later = ask(customer, "Where is my order S-7117?")
    path = export(tmp_path, later, include_personal_data=True)  # carries `earlier` for its refund

    # The deployment it moves to: its own customer's ticket happens to have the id of `earlier`.
    empty_the_ledger()
    _sequences_far_away()
    with connection.cursor() as cursor:
        cursor.execute("SELECT setval(pg_get_serial_sequence('tickets_ticket', 'id'), %s, false)", [earlier.pk])
    stranger = make_customer("stranger-here")
    theirs, _ = ticket_services.ticket_open(customer=stranger, subject="Hello", body="Where is my parcel?")
    assert theirs.pk == earlier.pk and theirs.customer_id != customer.pk

    with pytest.raises(CommandError) as refused:
        restore(path, on_conflict="skip")

    assert f"ticket #{earlier.pk} here is another ticket, so skipping it does not resolve this" in str(refused.value)
    assert not Ticket.objects.filter(pk=later.pk).exists()
    assert not Order.objects.filter(pk=order.pk).exists()
    assert Ticket.objects.get(pk=theirs.pk).customer_id == stranger.pk
