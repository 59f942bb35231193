"""A broker that cannot be reached loses only the doorbell: the customer's message is saved, their
request succeeds (no 500 for a message that was kept), and the sweeper rings the ticket later."""

from __future__ import annotations

import json

import pytest
from django.urls import reverse

from agents.tasks import tickets_needing_a_ring
from support.celery import app
from tests.conftest import make_customer
from tickets import services
from tickets.models import Message

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def broker_down():  # noqa: ANN201
    """Doorbells go to a port nothing listens on."""
    before = app.conf.broker_write_url
    app.close()  # the pooled connections to the real broker
    app.conf.broker_write_url = "redis://127.0.0.1:9/0"
    app.conf.broker_transport_options = {**app.conf.broker_transport_options, "max_retries": 0}
    yield
    app.conf.broker_write_url = before
    app.close()


def test_a_customer_message_is_kept_and_answered_later_when_the_broker_is_down(client, broker_down):
    customer = make_customer()
    ticket, _ = services.ticket_open(customer=customer, subject="Kettle", body="Where is my kettle?")
    client.force_login(customer.user)

    response = client.post(
        reverse("tickets:message_create", args=[ticket.pk]),
        data=json.dumps({"client_msg_id": "c-broker-down", "body": "Are you there?"}),
        content_type="application/json",
    )

    assert response.status_code in (200, 201), response.content
    assert Message.objects.filter(ticket=ticket, client_msg_id="c-broker-down").exists()
    assert ticket.pk in tickets_needing_a_ring()
