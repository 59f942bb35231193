"""A JSON body nested beyond reason, sent with a content type that is not JSON.

The customer's message endpoint and the confirmation endpoint read the body as JSON whatever
its content type says (a ``fetch`` with a string body sends ``text/plain``). A body of 100,000
``[`` is refused with a clear 400 and nothing is stored, as it is when labelled
``application/json``: it never reaches ``json.loads`` deep enough to raise ``RecursionError``.
"""

from __future__ import annotations

import pytest
from django.test import Client

from tests.conftest import make_customer
from tickets import services as ticket_services
from tickets.models import Message

pytestmark = pytest.mark.django_db

DEEP = b"[" * 100_000


def _signed_in_customer_with_ticket():
    customer = make_customer()
    ticket, _ = ticket_services.ticket_open(customer=customer, subject="Help", body="Hello")
    client = Client(raise_request_exception=False)
    client.force_login(customer.user)
    return client, ticket


@pytest.mark.parametrize("content_type", ["text/plain", "application/octet-stream"])
def test_a_deeply_nested_message_body_that_is_not_labelled_json_gets_a_400_not_a_500(content_type):
    client, ticket = _signed_in_customer_with_ticket()
    before = Message.objects.filter(ticket=ticket).count()

    response = client.post(f"/tickets/{ticket.pk}/messages", data=DEEP, content_type=content_type)

    assert response.status_code == 400, response.status_code
    assert Message.objects.filter(ticket=ticket).count() == before


def test_a_deeply_nested_confirmation_answer_that_is_not_labelled_json_gets_a_400_not_a_500():
    client, ticket = _signed_in_customer_with_ticket()

    response = client.post(f"/tickets/{ticket.pk}/confirmations/1", data=DEEP, content_type="text/plain")

    assert response.status_code == 400, response.status_code
