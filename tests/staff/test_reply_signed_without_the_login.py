"""A reply from a member of staff with no name on their account is signed "Support team", never with
their username: the username is how they sign in (half of what an attacker needs, and the name the
sign-in lockout counts failures by), and it reached every customer they answered, in the chat, in My
tickets and on the chat's socket."""

from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse

from tests.staff.conftest import make_support_staff
from tickets import services
from tickets.models import TicketEvent

pytestmark = pytest.mark.django_db


def test_a_reply_from_staff_without_a_name_does_not_show_the_customer_their_username(client: Client, customer):  # noqa: ANN001
    person = make_support_staff("mlopez.admin")
    ticket, _ = services.ticket_open(customer=customer, subject="Kettle", body="It leaks")
    services.staff_reply(ticket=ticket, user=person, body="I am sending a new kettle.", client_msg_id="r1")

    client.force_login(customer.user)
    chat = client.get(reverse("tickets:chat", args=[ticket.pk])).content.decode()
    listed = client.get(reverse("tickets:list")).content.decode()

    assert "I am sending a new kettle." in chat and "I am sending a new kettle." in listed
    assert "mlopez" not in chat and "mlopez" not in listed
    assert "Support team" in chat and "Support team" in listed
    reply = TicketEvent.objects.get(ticket=ticket, kind="message", actor_kind="staff")
    assert "mlopez" not in str(reply.payload)  # what the socket and any later reader are sent
