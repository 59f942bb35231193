"""An order's page in the admin takes a currency as people write it ("USD" is stored "usd", as the
ledger keeps it) and answers what it cannot store in words an operator reads: an unknown currency, a
total of nothing, a line of no items. It answered 'Constraint “order_currency_iso_lower” is violated.'
(for "USD" too), naming a database rule instead of what to type. Nothing is saved until it is right."""

from __future__ import annotations

import html
import re

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from tests.conftest import make_customer
from tickets.models import Order

pytestmark = pytest.mark.django_db


@pytest.fixture
def operator(client: Client) -> Client:
    client.force_login(get_user_model().objects.create_superuser("root", "root@example.com", "x"))
    return client


def _order_form(customer_id: int, **changes: str) -> dict[str, str]:
    return {
        "number": "N-1001", "customer": str(customer_id), "status": "paid", "currency": "usd", "total_cents": "4999",
        "payment_reference": "pi_n1001", "placed_at_0": "2026-01-05", "placed_at_1": "10:00:00",
        "lines-TOTAL_FORMS": "1", "lines-INITIAL_FORMS": "0", "lines-MIN_NUM_FORMS": "0", "lines-MAX_NUM_FORMS": "1000",
        "lines-0-sku": "K-1", "lines-0-description": "Kettle", "lines-0-quantity": "1",
        "lines-0-unit_price_cents": "4999",
        **changes,
    }  # fmt: skip


def _errors(response) -> str:  # noqa: ANN001
    found = re.findall(r'<ul class="errorlist[^"]*"[^>]*>(.*?)</ul>', response.content.decode(), re.S)
    return html.unescape(re.sub(r"<[^>]+>", " ", " ".join(found)))


def test_a_currency_written_in_capitals_is_stored_as_the_ledger_keeps_it(operator: Client):
    customer = make_customer()

    response = operator.post("/admin/tickets/order/add/", _order_form(customer.pk, currency="USD"))

    assert response.status_code == 302, _errors(response)
    assert Order.objects.get(number="N-1001").currency == "usd"


@pytest.mark.parametrize(
    ("changes", "words"),
    [
        ({"currency": "us"}, "not a currency"),
        ({"currency": "xyz"}, "not a currency"),
        ({"total_cents": "0"}, "more than zero"),
        ({"lines-0-quantity": "0"}, "at least 1"),
    ],
)
def test_what_an_order_cannot_hold_is_said_in_words_and_nothing_is_saved(operator: Client, changes, words):  # noqa: ANN001
    customer = make_customer()

    response = operator.post("/admin/tickets/order/add/", _order_form(customer.pk, **changes))

    said = _errors(response)
    assert response.status_code == 200 and not Order.objects.exists()
    assert words in said and "Constraint" not in said, said
