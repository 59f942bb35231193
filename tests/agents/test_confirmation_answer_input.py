"""the customer's confirm/cancel button endpoint answers bad input with a clear 400."""

from __future__ import annotations

import json
from urllib.parse import urlencode

import pytest
from django.test import Client

from tests.conftest import make_customer
from tickets import services as ticket_services

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize(
    "payload",
    [{"answer": ["confirm"], "digest": "d"}, {"answer": {"confirm": 1}, "digest": "d"}],
    ids=["answer-is-a-list", "answer-is-an-object"],
)
def test_an_answer_that_is_not_a_string_is_a_400_not_a_500(payload):
    customer = make_customer()
    ticket, _ = ticket_services.ticket_open(customer=customer, subject="Refund", body="Please refund")
    client = Client(raise_request_exception=False)
    client.force_login(customer.user)

    response = client.post(
        f"/tickets/{ticket.pk}/confirmations/1", data=json.dumps(payload), content_type="application/json"
    )

    assert response.status_code == 400, (response.status_code, response.content[:200])
    assert "answer" in response.json()["error"]


@pytest.mark.parametrize("encoding", ["multipart", "urlencoded"])
def test_an_answer_sent_as_a_form_is_read_from_its_fields(encoding):
    """A plain form (a browser's <form>, fetch with FormData) is read, not a 500: the middleware that
    checks input has read its body already, so the view reads the form's fields."""
    customer = make_customer()
    ticket, _ = ticket_services.ticket_open(customer=customer, subject="Refund", body="Please refund")
    client = Client(raise_request_exception=False)
    client.force_login(customer.user)
    url = f"/tickets/{ticket.pk}/confirmations/1"

    def post(fields):  # noqa: ANN001, ANN202
        if encoding == "multipart":
            return client.post(url, fields)
        return client.post(url, urlencode(fields), content_type="application/x-www-form-urlencoded")

    bad = post({"answer": "yes please", "digest": "x"})
    assert bad.status_code == 400, (bad.status_code, bad.content[:200])
    assert "answer" in bad.json()["error"]
    # A well-formed answer about a question this ticket does not have: read, and refused as such.
    unknown = post({"answer": "confirm", "digest": "x"})
    assert unknown.status_code == 404, (unknown.status_code, unknown.content[:200])
