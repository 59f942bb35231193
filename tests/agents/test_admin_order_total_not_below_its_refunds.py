"""An order's total is not set, on its admin page, below what was refunded on it (done, pending or
uncertain): the page took it, and the ledger then said more was paid back on the order than it cost
($30.00 refunded on a $10.00 order)."""

from __future__ import annotations

import pytest
from django.utils import timezone

from agents.models import Refund, RefundStatus
from agents.runner import advance
from tests.agents.test_money_gates import Refunds
from tests.agents.test_money_path import order_for
from tests.conftest import make_customer
from tickets import services
from tickets.models import Order

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(120)]


def order_refunded_in_part(sandbox) -> Order:  # noqa: ANN001
    customer = make_customer()
    order = order_for(customer, "T-4001", 5000, sandbox)
    ticket, _ = services.ticket_open(customer=customer, subject="Refund", body="Refund $30 of T-4001 please")
    advance(ticket.pk, model=Refunds(("T-4001", 3000)))
    assert Refund.objects.get(order=order).status == RefundStatus.SUCCEEDED
    return order


def save_total(admin_client, order: Order, cents: int):  # noqa: ANN001, ANN201
    url = f"/admin/tickets/order/{order.pk}/change/"
    page = admin_client.get(url).context
    form = page["adminform"].form
    data = {name: form[name].value() for name in form.fields if form[name].value() is not None}
    for name in ("placed_at", "shipped_at", "delivered_at"):  # a date and a time, as the page sends them
        if name in data:
            shown = timezone.localtime(data.pop(name))
            data.update({f"{name}_0": shown.date().isoformat(), f"{name}_1": shown.time().isoformat()})
    formset = page["inline_admin_formsets"][0].formset
    data.update({f"{formset.prefix}-{k}": v for k, v in formset.management_form.initial.items()})
    for i, line in enumerate(formset.forms):
        data.update({f"{formset.prefix}-{i}-{n}": line[n].value() for n in line.fields if line[n].value() is not None})
    return admin_client.post(url, {**data, "total_cents": cents})


def test_a_total_below_what_was_refunded_is_refused(admin_client, sandbox):  # noqa: ANN001
    order = order_refunded_in_part(sandbox)

    page = save_total(admin_client, order, 1000)

    assert page.status_code == 200
    assert "$30.00 was refunded on this order" in page.content.decode()
    order.refresh_from_db()
    assert order.total_cents == 5000


def test_a_total_at_or_above_what_was_refunded_is_saved(admin_client, sandbox):  # noqa: ANN001
    order = order_refunded_in_part(sandbox)

    page = save_total(admin_client, order, 3000)

    assert page.status_code == 302, page.content.decode()[-3000:]
    order.refresh_from_db()
    assert order.total_cents == 3000
