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


def _multipart(*parts: tuple[bytes, bytes, bytes | None]) -> tuple[bytes, str]:
    """A multipart body of (field name, value, file name or None) parts, bytes as given."""
    boundary = b"----chat-form-boundary"
    body = b""
    for name, value, filename in parts:
        disposition = b'form-data; name="' + name + b'"'
        if filename is not None:
            disposition += b'; filename="' + filename + b'"'
        body += b"--" + boundary + b"\r\nContent-Disposition: " + disposition + b"\r\n"
        if filename is not None:
            body += b"Content-Type: application/octet-stream\r\n"
        body += b"\r\n" + value + b"\r\n"
    body += b"--" + boundary + b"--\r\n"
    return body, f"multipart/form-data; boundary={boundary.decode()}"


@pytest.mark.parametrize(
    "parts",
    [
        # The caption of a photo in Latin-1.
        [(b"client_msg_id", b"multi-1", None), (b"body", b"caf\xe9 au lait", None)],
        # In the client message ID.
        [(b"client_msg_id", b"caf\xe9", None), (b"body", b"coffee", None)],
        # A UTF-8 sequence cut short.
        [(b"client_msg_id", b"multi-3", None), (b"body", b"\xe2\x82", None)],
        # A field's name.
        [(b"client_msg_id", b"multi-4", None), (b"body", b"coffee", None), (b"caf\xe9", b"x", None)],
        # A file's name.
        [(b"client_msg_id", b"multi-5", None), (b"body", b"a photo", None), (b"files", b"GIF89a", b"caf\xe9.gif")],
    ],
)
def test_a_multipart_message_with_bytes_not_utf8_is_a_400_and_stores_nothing(signed_in, parts):
    client, ticket = signed_in
    before = list(Message.objects.values_list("pk", flat=True))
    body, content_type = _multipart(*parts)

    url = f"/tickets/{ticket.pk}/messages"
    response = client.post(url, body, content_type=content_type, HTTP_ACCEPT="application/json")

    assert response.status_code == 400, response.content[:300]
    assert "UTF-8" in response.json()["error"]
    assert list(Message.objects.values_list("pk", flat=True)) == before


def test_a_multipart_message_in_utf8_is_stored_as_sent(signed_in):
    client, ticket = signed_in
    body, content_type = _multipart((b"client_msg_id", b"multi-ok", None), (b"body", "café au lait".encode(), None))

    url = f"/tickets/{ticket.pk}/messages"
    response = client.post(url, body, content_type=content_type, HTTP_ACCEPT="application/json")

    assert response.status_code == 201, response.content[:300]
    assert Message.objects.get(ticket=ticket, client_msg_id="multi-ok").body == "café au lait"
