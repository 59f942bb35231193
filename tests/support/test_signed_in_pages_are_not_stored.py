"""Pages shown to a signed-in person say ``Cache-Control: no-store``: on a shared computer, Back after
signing out fetches the page again (and gets the sign-in page), instead of showing the chat from the
browser's cache. Decided from the session the request came with, never by loading the user: the
web server that cannot reach its database still answers its 503 at once, without a query."""

from __future__ import annotations

import pytest
from django.db import OperationalError
from django.http import HttpRequest, HttpResponse
from django.test import Client
from django.urls import path

from tickets import services

pytestmark = pytest.mark.django_db


def _database_gone(request: HttpRequest) -> HttpResponse:
    raise OperationalError("connection to server at 127.0.0.1, port 5432 failed: Connection refused")


# This module is the site's URLconf in the test of the 503: one page whose database is away.
urlpatterns = [path("database-gone/", _database_gone)]
handler500 = "support.views.server_error"


def signed_in(customer) -> Client:  # noqa: ANN001
    client = Client()
    client.force_login(customer.user)
    return client


def test_a_signed_in_customers_chat_and_ticket_list_are_not_stored_by_the_browser(customer):  # noqa: ANN001
    ticket, _ = services.ticket_open(customer=customer, subject="Kettle", body="Where is my kettle?")
    client = signed_in(customer)

    for page in (f"/tickets/{ticket.pk}/", "/tickets/"):
        response = client.get(page)
        assert response.status_code == 200
        assert "no-store" in response.get("Cache-Control", ""), (page, response.get("Cache-Control"))


def test_the_503_of_a_web_server_cut_from_its_database_is_not_stored_and_asks_the_database_nothing(
    customer,  # noqa: ANN001
    settings,  # noqa: ANN001
    django_assert_num_queries,  # noqa: ANN001
):
    client = signed_in(customer)
    client.raise_request_exception = False
    settings.DEBUG = False  # the site's own 500 handler answers, as in production
    settings.ROOT_URLCONF = __name__

    with django_assert_num_queries(0):
        response = client.get("/database-gone/")

    assert response.status_code == 503
    assert "no-store" in response.get("Cache-Control", ""), response.get("Cache-Control")
