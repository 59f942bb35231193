"""An order's admin page read before a colleague changed the order or one of its lines does not write
the old values back, as a browser posts it.

The page's lines (quantity, unit price) were written back as read: Django compares what is posted
with the row as it is at the save, so a line a colleague corrected since looked "changed" and got the
old values again. And the page itself never sent what it had read (its ``page_read`` field was not
among the page's fields, so no browser posted it): the order's status a refund set meanwhile was put
back too, although a test that posted every form field said otherwise. Now the page and each line
carry what they showed; only what the person changed is written, and a change to a value someone
changed since is refused, nothing saved.
"""

from __future__ import annotations

import re

import pytest
from django.contrib.auth import get_user_model
from django.test import Client
from django.urls import reverse

from tests.conftest import make_customer, make_order
from tests.tickets.test_order_page_read_before_a_status_change import _page_as_shown
from tickets.models import Order, OrderLine, OrderStatus

pytestmark = pytest.mark.django_db


def _admin() -> Client:
    client = Client()
    client.force_login(get_user_model().objects.create_superuser("ops", "ops@example.test", "pw-admin-123"))
    return client


def _as_a_browser_posts(client: Client, order: Order) -> dict:
    """What the page posts on Save as a browser sends it: only the fields the page has."""
    url = reverse("admin:tickets_order_change", args=[order.pk])
    shown = set(re.findall(r'name="([^"]+)"', client.get(url).content.decode()))
    return {name: value for name, value in _page_as_shown(client, order).items() if name in shown}


def test_the_page_and_each_line_carry_what_they_showed():
    order = make_order(make_customer())
    page = _admin().get(reverse("admin:tickets_order_change", args=[order.pk])).content.decode()
    assert 'name="page_read"' in page
    assert 'name="lines-0-page_read"' in page


def test_a_stale_order_page_does_not_put_back_the_status_a_refund_set():
    order = make_order(make_customer(), status=OrderStatus.DELIVERED)
    admin = _admin()
    stale = _as_a_browser_posts(admin, order)
    Order.objects.filter(pk=order.pk).update(status=OrderStatus.REFUNDED)  # a full refund is paid meanwhile

    stale["payment_reference"] = "pi_corrected"
    answer = admin.post(reverse("admin:tickets_order_change", args=[order.pk]), stale)

    assert answer.status_code == 302, answer.context["errors"]
    order.refresh_from_db()
    assert order.payment_reference == "pi_corrected"
    assert order.status == OrderStatus.REFUNDED, "a page read before the refund put the old status back"


def test_a_stale_order_page_does_not_put_back_a_line_a_colleague_corrected():
    order = make_order(make_customer(), total_cents=5000)
    line = OrderLine.objects.get(order=order)
    admin = _admin()
    stale = _as_a_browser_posts(admin, order)
    OrderLine.objects.filter(pk=line.pk).update(quantity=2, unit_price_cents=2500)  # a colleague's correction

    stale["payment_reference"] = "pi_corrected"  # the page only corrects the payment reference
    answer = admin.post(reverse("admin:tickets_order_change", args=[order.pk]), stale)

    assert answer.status_code == 302, answer.context["errors"]
    line.refresh_from_db()
    assert (line.quantity, line.unit_price_cents) == (2, 2500), "the page read before put the old line back"
    assert Order.objects.get(pk=order.pk).payment_reference == "pi_corrected"


def test_a_line_changed_on_a_stale_page_that_a_colleague_changed_since_is_refused():
    order = make_order(make_customer(), total_cents=5000)
    line = OrderLine.objects.get(order=order)
    reference = order.payment_reference
    admin = _admin()
    stale = _as_a_browser_posts(admin, order)
    OrderLine.objects.filter(pk=line.pk).update(quantity=2)

    stale["lines-0-quantity"] = "3"
    stale["payment_reference"] = "pi_corrected"
    answer = admin.post(reverse("admin:tickets_order_change", args=[order.pk]), stale)

    assert answer.status_code == 200 and "changed by someone else" in answer.content.decode()
    line.refresh_from_db()
    assert line.quantity == 2
    assert Order.objects.get(pk=order.pk).payment_reference == reference, "saved from a refused page"


def test_a_line_changed_on_a_fresh_page_is_saved():
    order = make_order(make_customer(), total_cents=5000)
    line = OrderLine.objects.get(order=order)
    admin = _admin()
    page = _as_a_browser_posts(admin, order)

    page["lines-0-quantity"] = "4"
    answer = admin.post(reverse("admin:tickets_order_change", args=[order.pk]), page)

    assert answer.status_code == 302, answer.context["errors"]
    line.refresh_from_db()
    assert (line.quantity, line.unit_price_cents) == (4, 5000)
