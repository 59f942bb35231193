"""Bytes that are not UTF-8 in a form or a query are a clear 400, with nothing stored. Django reads
them as U+FFFD replacement characters: the chat stored a message of "�" with a 201, and its client
message ID changed (a retry of it under the bytes it was sent with was another message)."""

from __future__ import annotations

import pytest
from django.test import Client

from tests.conftest import make_customer
from tickets import services
from tickets.models import Message, Ticket

pytestmark = pytest.mark.django_db(transaction=True)
FORM = "application/x-www-form-urlencoded"


@pytest.fixture
def signed_in():
    customer = make_customer()
    client = Client(raise_request_exception=False)
    client.force_login(customer.user)
    ticket, _ = services.ticket_open(customer=customer, subject="Kettle", body="Where is my kettle?")
    return client, ticket


@pytest.mark.parametrize(
    "body",
    [
        b"client_msg_id=latin-1&body=caf%E9+au+lait",  # Latin-1, percent-encoded
        b"client_msg_id=caf%E9&body=coffee",  # in the client message ID
        b"client_msg_id=raw-1&body=caf\xe9",  # Latin-1, sent raw
        b"client_msg_id=cut-1&body=%E2%82",  # a UTF-8 sequence cut short
    ],
)
def test_a_message_form_with_bytes_not_utf8_is_a_400_and_stores_nothing(signed_in, body):
    client, ticket = signed_in
    before = list(Message.objects.values_list("pk", flat=True))

    response = client.post(f"/tickets/{ticket.pk}/messages", body, content_type=FORM, HTTP_ACCEPT="application/json")

    assert response.status_code == 400, response.content[:300]
    assert "UTF-8" in response.json()["error"]
    assert list(Message.objects.values_list("pk", flat=True)) == before


def test_the_same_message_in_utf8_is_stored_as_sent(signed_in):
    client, ticket = signed_in

    response = client.post(
        f"/tickets/{ticket.pk}/messages", "client_msg_id=utf8-1&body=caf%C3%A9+au+lait", content_type=FORM
    )

    assert response.status_code == 201, response.content[:300]
    assert Message.objects.get(ticket=ticket, client_msg_id="utf8-1").body == "café au lait"


def test_a_new_ticket_form_with_bytes_not_utf8_opens_no_ticket(signed_in):
    client, _ = signed_in
    before = Ticket.objects.count()

    response = client.post("/tickets/new/", b"subject=Kettle&body=br%FBl%E9&client_ref=latin-form", content_type=FORM)

    assert response.status_code == 400, response.content[:300]
    assert "UTF-8" in response.content.decode()
    assert Ticket.objects.count() == before


def test_a_query_with_bytes_not_utf8_is_a_400(signed_in):
    client, ticket = signed_in

    response = client.get(f"/tickets/{ticket.pk}/?after=%FF")

    assert response.status_code == 400, response.content[:300]
    assert "UTF-8" in response.content.decode()
