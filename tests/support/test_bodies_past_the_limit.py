"""A request body past DATA_UPLOAD_MAX_MEMORY_SIZE is a 413 that says so, in JSON to a JSON client,
with nothing stored. Django refused it as a SuspiciousOperation: a bare "Bad Request (400)" page,
which the chat's script could only show as "please try again" (the same message again)."""

from __future__ import annotations

import json

import pytest
from django.test import Client

from tests.conftest import make_customer
from tickets import services
from tickets.models import Message, Ticket

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def signed_in():
    customer = make_customer()
    client = Client(raise_request_exception=False)
    client.force_login(customer.user)
    ticket, _ = services.ticket_open(customer=customer, subject="Kettle", body="Where is my kettle?")
    return client, ticket


def test_a_json_message_past_the_limit_is_a_413_in_json_and_stores_nothing(signed_in, settings):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 10_000
    client, ticket = signed_in
    before = Message.objects.count()

    response = client.post(
        f"/tickets/{ticket.pk}/messages",
        json.dumps({"client_msg_id": "big-1", "body": "x" * 20_000}),
        content_type="application/json",
    )

    assert response.status_code == 413, response.content[:200]
    assert "10000 bytes" in response.json()["error"]
    assert Message.objects.count() == before


def test_a_form_past_the_limit_is_a_413_that_says_so_and_opens_no_ticket(signed_in, settings):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 10_000
    client, _ = signed_in
    before = Ticket.objects.count()

    response = client.post("/tickets/new/", {"subject": "Big", "body": "x" * 20_000, "client_ref": "big-form"})

    assert response.status_code == 413, response.content[:200]
    assert "10000 bytes" in response.content.decode()
    assert Ticket.objects.count() == before
