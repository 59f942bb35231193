"""A chat socket ends when the ticket stops being its login's.

An operator moves a customer's profile (and with it their tickets and orders) to another login in the
admin: the login it was on (a colleague's, a duplicate account handed to someone else) no longer opens
those tickets' pages, and must not go on receiving their conversation on a chat socket opened before.
"""

from __future__ import annotations

import json

import pytest
from asgiref.sync import async_to_sync
from channels.db import database_sync_to_async
from django.contrib.auth import get_user_model
from django.test import Client

from tests.tickets.test_consumer import session_cookie, socket, until_ready
from tickets import services
from tickets.admin import CustomerAdminForm
from tickets.models import AuthorKind, Customer

pytestmark = pytest.mark.django_db(transaction=True)


def _move_profile_in_the_admin(customer: Customer, new_user) -> None:  # noqa: ANN001
    operator = get_user_model().objects.create_superuser("operator", password="op-pass-123", email="op@example.test")
    admin = Client()
    admin.force_login(operator)
    response = admin.post(
        f"/admin/tickets/customer/{customer.pk}/change/",
        {
            "user": new_user.pk,
            "name": customer.name,
            "email": customer.email,
            "page_read": json.dumps(CustomerAdminForm.values_of(customer)),
        },
    )
    assert response.status_code == 302, response.content[:500]
    assert Customer.objects.get(pk=customer.pk).user_id == new_user.pk


def test_a_chat_socket_stops_receiving_once_the_customer_profile_is_moved_to_another_login(customer):
    ticket, _ = services.ticket_open(customer=customer, subject="Kettle", body="Where is my kettle?")
    headers = session_cookie(customer)
    old_login = Client()
    old_login.force_login(customer.user)
    new_user = get_user_model().objects.create_user("the-real-customer", password="pw-for-tests-123")

    async def scenario() -> list[dict]:
        ws = socket(ticket.pk, after=ticket.last_event_seq, headers=headers)
        assert (await ws.connect())[0]
        await until_ready(ws)

        await database_sync_to_async(_move_profile_in_the_admin)(customer, new_user)
        # The old login's pages no longer open the ticket.
        page = await database_sync_to_async(old_login.get)(f"/tickets/{ticket.pk}/")
        assert page.status_code == 404

        await database_sync_to_async(services.message_post)(
            ticket=ticket.pk, author_kind=AuthorKind.STAFF, body="Your refund of $40 goes to the card ending 4242."
        )
        frames = []
        while not await ws.receive_nothing(timeout=1.5):
            output = await ws.receive_output(timeout=1)
            if output["type"] == "websocket.close":
                frames.append({"type": "closed", "code": output.get("code")})
                break
            frames.append(json.loads(output["text"]))
        await ws.disconnect()
        return frames

    frames = async_to_sync(scenario)()
    leaked = [f.get("text") for f in frames if f.get("type") == "event" and f.get("kind") == "message"]
    assert leaked == [], f"a login that no longer has the ticket still receives its conversation: {leaked}"
    assert frames and frames[-1]["type"] == "closed"
