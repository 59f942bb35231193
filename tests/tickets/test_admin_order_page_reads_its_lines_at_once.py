"""An order's admin page shows its lines, each with its unit price as money, in as many queries
however many lines the order has: each line's price read the order again (for its currency), one
query per line."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from tests.conftest import make_customer, make_order
from tickets.models import Order, OrderLine

pytestmark = pytest.mark.django_db(transaction=True)


def queries_to_open(admin_client, order: Order) -> tuple[int, str]:  # noqa: ANN001
    url = f"/admin/tickets/order/{order.pk}/change/"
    admin_client.get(url)  # what is read once per process (content types)
    with CaptureQueriesContext(connection) as queries:
        page = admin_client.get(url)
    assert page.status_code == 200
    return len(queries.captured_queries), page.content.decode()


def test_an_orders_page_opens_in_as_many_queries_with_many_lines(admin_client):  # noqa: ANN001
    order = make_order(make_customer(), number="L-1001", total_cents=1999)  # one line
    few, _ = queries_to_open(admin_client, order)

    OrderLine.objects.bulk_create(
        OrderLine(order=order, sku=f"SKU-{n}", description=f"Part {n}", quantity=1, unit_price_cents=100 + n)
        for n in range(30)
    )
    many, page = queries_to_open(admin_client, order)

    assert "$1.29" in page  # the last line's price, shown as money
    assert many == few
