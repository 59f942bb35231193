"""An order's admin page read before its status changed does not put the old status back.

A full refund marks the order refunded (``agents.refunds``). Django compares what a change page
posts with the row as it is at the save, so a page read before would write "delivered" back with
any other correction made on it (a shipping date), and the order would read refundable again.
The order's page writes only what was changed on it and refuses a change to a value someone
changed since it was read, as the customer's and the ticket's pages do.
"""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.forms import MultiWidget
from django.test import Client
from django.urls import reverse

from tests.conftest import make_customer, make_order
from tickets.models import Order, OrderStatus

pytestmark = pytest.mark.django_db


def _admin(name: str) -> Client:
    client = Client()
    client.force_login(get_user_model().objects.create_superuser(name, f"{name}@example.test", "pw-admin-123"))
    return client


def _page_as_shown(client: Client, order: Order) -> dict:
    """What the order's page posts on Save, as it was shown: the form and its order lines."""
    return _page_as_shown_at(client, reverse("admin:tickets_order_change", args=[order.pk]))


def _page_as_shown_at(client: Client, url: str) -> dict:
    """What an admin change page posts on Save, as it was shown: the form and its inlines."""
    page = client.get(url)
    assert page.status_code == 200
    data = {}
    forms = [page.context["adminform"].form]
    for formset in page.context["inline_admin_formsets"]:
        management = formset.formset.management_form
        data.update({management[name].html_name: management[name].value() for name in management.fields})
        forms += list(formset.formset.forms)
    for form in forms:
        for name in form.fields:
            value, widget = form[name].value(), form.fields[name].widget
            if isinstance(widget, MultiWidget):  # a date and a time
                for i, (part, shown) in enumerate(zip(widget.widgets, widget.decompress(value), strict=True)):
                    data[f"{form[name].html_name}_{i}"] = part.format_value(shown) or ""
            elif isinstance(value, bool):
                if value:
                    data[form[name].html_name] = "on"
            else:
                data[form[name].html_name] = "" if value is None else value
    return data


def test_a_stale_order_page_does_not_put_back_the_status_a_refund_set():
    order = make_order(make_customer(), status=OrderStatus.DELIVERED)
    first = _admin("first-admin")
    stale = _page_as_shown(first, order)  # read while the order is delivered

    Order.objects.filter(pk=order.pk).update(status=OrderStatus.REFUNDED)  # a full refund is paid meanwhile

    stale["payment_reference"] = "pi_corrected"  # the first admin only corrects the payment reference
    answer = first.post(reverse("admin:tickets_order_change", args=[order.pk]), stale)
    assert answer.status_code == 302, answer.context["errors"]
    order.refresh_from_db()
    assert order.payment_reference == "pi_corrected"
    assert order.status == OrderStatus.REFUNDED, "a page read before the refund put the old status back"


def test_the_page_refuses_a_status_someone_changed_since_it_was_read():
    order = make_order(make_customer(), status=OrderStatus.DELIVERED)
    admin = _admin("first-admin")
    reference = order.payment_reference
    stale = _page_as_shown(admin, order)
    Order.objects.filter(pk=order.pk).update(status=OrderStatus.REFUNDED)

    stale["status"] = OrderStatus.SHIPPED
    stale["payment_reference"] = "pi_corrected"
    answer = admin.post(reverse("admin:tickets_order_change", args=[order.pk]), stale)
    assert answer.status_code == 200 and "changed by someone else" in answer.content.decode()
    order.refresh_from_db()
    assert (order.status, order.payment_reference) == (OrderStatus.REFUNDED, reference), "saved from a refused page"
