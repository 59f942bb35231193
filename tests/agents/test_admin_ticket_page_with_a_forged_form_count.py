"""The ticket's admin page answers a hand-made form count with the form's error, not a 500.

The page's read-only lists (messages, timeline, runs, calls, refunds, approvals) each send a form
count. A count over Django's limit (a hand-made or garbled request) is the formset's own error
("Please submit at most 1000 forms"), and the page is shown again with empty rows: the refunds'
list showed an empty row's amount as money, and the page answered 500 (``format_money(None)``).
"""

from __future__ import annotations

import pytest
from django.urls import reverse

from tests.conftest import make_customer
from tests.tickets.test_order_page_read_before_a_status_change import _page_as_shown_at
from tickets import services
from tickets.models import Ticket

pytestmark = pytest.mark.django_db


def test_a_forged_count_of_refunds_is_refused_in_words_and_changes_nothing(admin_client):  # noqa: ANN001
    ticket, _ = services.ticket_open(customer=make_customer(), subject="Kettle", body="My kettle K-9 leaks.")
    change = reverse("admin:tickets_ticket_change", args=[ticket.pk])
    page = _page_as_shown_at(admin_client, change)
    page["refunds-TOTAL_FORMS"] = "99999999999999999999999"
    page["subject"] = "Kettle (changed)"

    answer = admin_client.post(change, page)

    assert answer.status_code == 200, f"a forged form count answered HTTP {answer.status_code}"
    assert "Please submit at most" in answer.content.decode()
    assert Ticket.objects.get(pk=ticket.pk).subject == "Kettle"
