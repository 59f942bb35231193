"""A message ID sent by a customer's or a staff member's client can never take one of the agent's keys.

The product posts its own messages under keys of the form ``<kind>:<id>`` (the agent's reply
``reply:<run>:<step>``, the parking note ``parked-note:<run>``, the hand-off ``handoff:<run>``,
the acknowledgement ``waiting:<message>``). An ID chosen outside with a colon is refused with a
clear 400 and nothing is stored: a customer who sent ``reply:7:0`` first would otherwise hold
the key the agent's answer is posted under, and the agent could never post it.
"""

from __future__ import annotations

import json

import pytest
from django.test import Client
from django.urls import reverse

from agents.models import AgentRun, RunStatus
from agents.runner import advance
from tests.conftest import make_customer
from tests.staff.conftest import make_support_staff
from tickets import services as ticket_services
from tickets.models import AuthorKind, Message

pytestmark = pytest.mark.django_db

TAKEN = ["reply:1:0", "parked-note:1", "handoff:1", "waiting:1", "open:x", " reply:1:0 "]


def _customer_with_ticket():
    customer = make_customer()
    ticket, _ = ticket_services.ticket_open(customer=customer, subject="Help", body="Hello")
    client = Client()
    client.force_login(customer.user)
    return client, ticket


@pytest.mark.parametrize("key", TAKEN)
@pytest.mark.parametrize("form", ["json", "multipart"])
def test_a_customer_message_id_with_a_colon_is_refused_and_nothing_is_stored(key, form):
    client, ticket = _customer_with_ticket()
    before = Message.objects.filter(ticket=ticket).count()
    url = f"/tickets/{ticket.pk}/messages"
    if form == "json":
        body = json.dumps({"client_msg_id": key, "body": "Is my refund done?"})
        response = client.post(url, data=body, content_type="application/json")
    else:
        response = client.post(url, data={"client_msg_id": key, "body": "Is my refund done?"})

    assert response.status_code == 400, response.content
    assert "may not contain a colon" in response.json()["error"]
    assert Message.objects.filter(ticket=ticket).count() == before


def test_the_agent_answers_under_its_own_key_after_a_customer_tried_to_take_it():
    client, ticket = _customer_with_ticket()
    advance(ticket.pk)  # the first answer: run 1 of the ticket, its reply keyed reply:<run>:<step>
    run = AgentRun.objects.get(ticket=ticket)
    key = f"reply:{run.pk + 1}:0"  # the key the next run's answer would take, if it were free

    refused = client.post(
        f"/tickets/{ticket.pk}/messages",
        data=json.dumps({"client_msg_id": key, "body": "Where is my order?"}),
        content_type="application/json",
    )
    sent = client.post(
        f"/tickets/{ticket.pk}/messages",
        data=json.dumps({"client_msg_id": "c2", "body": "Where is my order?"}),
        content_type="application/json",
    )
    outcome = advance(ticket.pk)

    assert refused.status_code == 400 and sent.status_code == 201
    assert outcome.state == RunStatus.COMPLETED
    assert not Message.objects.filter(ticket=ticket, author_kind=AuthorKind.CUSTOMER, client_msg_id=key).exists()
    answers = Message.objects.filter(ticket=ticket, author_kind=AuthorKind.AGENT, client_msg_id__startswith="reply:")
    assert answers.count() == 2


@pytest.mark.parametrize("view", ["staff:reply", "staff:note"])
def test_a_staff_message_id_with_a_colon_is_refused_and_nothing_is_stored(view):
    _, ticket = _customer_with_ticket()
    person = make_support_staff("colon-writer")
    staff = Client()
    staff.force_login(person)
    staff.post(reverse("staff:take_over", args=[ticket.pk]))
    before = Message.objects.filter(ticket=ticket).count()

    response = staff.post(reverse(view, args=[ticket.pk]), {"body": "Hello from us", "client_msg_id": "handoff:1"})

    assert response.status_code == 400
    assert Message.objects.filter(ticket=ticket).count() == before
    ok = staff.post(reverse(view, args=[ticket.pk]), {"body": "Hello from us", "client_msg_id": "r1"})
    assert ok.status_code == 302
    assert Message.objects.filter(ticket=ticket).count() == before + 1
