"""the customer's confirm/cancel button endpoint answers bad input with a clear 400."""

from __future__ import annotations

import json

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
