"""The ticket page a person works from says when a refund failed without the payment provider ever
showing it: it may still be paid (a request still on its way lands, and the ledger takes it in). Read
as a plain "Failed", with the order "refunded" nothing, a person refunds the customer by hand in the
provider's dashboard, and the order is paid back twice when the first request lands.
"""

from __future__ import annotations

import html
import re

import pytest
from django.test import Client
from django.urls import reverse

from agents.runner import advance
from tests.agents.test_money_gates import Refunds, only_the_order_threshold
from tests.agents.test_money_path import order_for
from tests.agents.test_refund_failed_unseen import _first_request_stays_on_its_way, _reconciler_gives_up_on_it
from tests.conftest import make_customer
from tests.staff.conftest import make_support_staff
from tickets import services as ticket_services

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(180)]


@pytest.fixture(autouse=True)
def _one_provider_attempt(settings):  # noqa: ANN001
    settings.REFUND_PROVIDER_ATTEMPTS = 1
    settings.REFUND_RETRY_FIRST_WAIT_MS = 5
    settings.REFUND_RETRY_MAX_WAIT_MS = 20


def _text(page: str, pattern: str) -> str:
    found = re.search(pattern, page, re.S)
    assert found, pattern
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", found.group(1))).split())


def test_the_ticket_page_says_a_refund_failed_unseen_may_still_be_paid(sandbox, monkeypatch):  # noqa: ANN001
    only_the_order_threshold()
    customer = make_customer()
    order_for(customer, "S-1001", 30000, sandbox)
    _first_request_stays_on_its_way(monkeypatch)
    ticket, _ = ticket_services.ticket_open(customer=customer, subject="Refund", body="Refund $150 on S-1001")
    advance(ticket.pk, model=Refunds(("S-1001", 15000)))
    _reconciler_gives_up_on_it()
    client = Client()
    client.force_login(make_support_staff("maria"))

    page = client.get(reverse("staff:ticket", args=[ticket.pk])).content.decode()

    orders = _text(page, r'<ul class="orders">(.*?)</ul>')
    refunds = _text(page, r'<ul class="refunds">(.*?)</ul>')
    assert "may still be paid $150.00" in orders, orders
    assert "may still be paid" in refunds, refunds
