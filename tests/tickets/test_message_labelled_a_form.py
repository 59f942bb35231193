"""A message sent with the content type of a plain form (application/x-www-form-urlencoded).

The input check at the door reads such a body as the form it says it is; the send endpoint read it
as JSON whatever its label. A JSON body with a NUL character or a lone surrogate in its message ID,
labelled a form, passed the check and reached the database: a 500 ("PostgreSQL text fields cannot
contain NUL"). The endpoint now reads a plain form as a form, as the confirmation endpoint does.
"""

from __future__ import annotations

import pytest
from django.test import Client

from tests.conftest import make_customer
from tickets import services
from tickets.models import Message

pytestmark = pytest.mark.django_db

FORM = "application/x-www-form-urlencoded"


@pytest.fixture
def chat():  # noqa: ANN201
    customer = make_customer()
    ticket, _ = services.ticket_open(customer=customer, subject="Kettle", body="Where is my kettle?")
    client = Client(raise_request_exception=False)
    client.force_login(customer.user)
    return client, ticket


@pytest.mark.parametrize("key", [r"a\u0000", r"\ud800"], ids=["nul", "lone-surrogate"])
def test_a_json_body_labelled_a_form_with_an_id_the_database_cannot_hold_is_a_400_and_stores_nothing(chat, key):
    client, ticket = chat
    before = list(Message.objects.filter(ticket=ticket).values_list("pk", flat=True))
    body = '{"client_msg_id": "' + key + '", "body": "Is it shipped?"}'

    response = client.post(f"/tickets/{ticket.pk}/messages", data=body, content_type=FORM)

    assert response.status_code == 400, (response.status_code, response.content[:200])
    assert response.json()["error"]
    assert list(Message.objects.filter(ticket=ticket).values_list("pk", flat=True)) == before


def test_a_plain_form_posts_the_message_once(chat):
    client, ticket = chat
    form = "client_msg_id=m-form-1&body=Is+it+shipped%3F"

    first = client.post(f"/tickets/{ticket.pk}/messages", data=form, content_type=FORM)
    again = client.post(f"/tickets/{ticket.pk}/messages", data=form, content_type=FORM)

    assert (first.status_code, again.status_code) == (201, 200), (first.content[:200], again.content[:200])
    assert first.json()["message"]["id"] == again.json()["message"]["id"]
    assert Message.objects.filter(ticket=ticket, client_msg_id="m-form-1").get().body == "Is it shipped?"
