"""A JSON request refused by the CSRF check (a chat message, a confirmation sent from a page older
than the browser's sign-in, or with its token cookie gone) is answered in JSON with the reason, as
every other refusal of those endpoints: it was the HTML page for forms, which the chat's script could
only show as "please try again". Nothing is stored."""

from __future__ import annotations

import json

import pytest
from django.test import Client

from tests.conftest import make_customer
from tickets import services
from tickets.models import Message

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.mark.parametrize("path", ["/tickets/{id}/messages", "/tickets/{id}/confirmations/1"])
def test_a_json_request_without_its_csrf_token_is_refused_in_json(path):
    customer = make_customer()
    ticket, _ = services.ticket_open(customer=customer, subject="Kettle", body="Where is my kettle?")
    browser = Client(enforce_csrf_checks=True)
    browser.force_login(customer.user)
    before = Message.objects.count()

    response = browser.post(
        path.format(id=ticket.pk),
        json.dumps({"client_msg_id": "m1", "body": "hello", "answer": "confirm", "digest": "d"}),
        content_type="application/json",
    )

    assert response.status_code == 403
    assert "reload the page" in response.json()["error"]
    assert Message.objects.count() == before


def test_a_form_without_its_csrf_token_still_gets_the_page():
    browser = Client(enforce_csrf_checks=True)
    browser.force_login(make_customer().user)

    response = browser.post("/tickets/new/", {"subject": "Hi", "body": "Hello", "client_ref": "r1"})

    assert response.status_code == 403 and b"the page was out of date" in response.content
