"""A staff socket ends with the permission its page needs: a member of staff taken out of the
"Support staff" group (nothing else saved) stops receiving the approval dashboard's and the ticket
page's live frames, and a socket whose session ended without a notice is closed at its next
recheck before a send (``SignedInConsumer.may_watch``, rechecked on the group change's ring)."""

from __future__ import annotations

import asyncio

import pytest
from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator
from django.contrib.auth.models import Group

from approvals.services import STAFF_GROUP
from staff.permissions import GROUP
from support.asgi import application
from tests.conftest import make_customer
from tests.staff.conftest import make_support_staff
from tests.staff.test_consumer import staff_headers, staff_socket
from tests.tickets.test_consumer import run
from tickets import realtime, services

pytestmark = pytest.mark.django_db(transaction=True)


def _remove_from_support_staff(user) -> None:  # noqa: ANN001
    """Taken out of the group, from the group's side (nothing of the user is saved)."""
    Group.objects.get(name=GROUP).user_set.remove(user)


async def _closed_or_silent(ws: WebsocketCommunicator) -> dict:
    try:
        return await ws.receive_output(timeout=2)
    except TimeoutError:
        return {}


def test_the_approvals_socket_stops_once_the_user_may_no_longer_decide():
    person = make_support_staff("maria")
    headers = staff_headers(person)

    async def scenario() -> None:
        ws = WebsocketCommunicator(application, "/ws/staff/approvals/", headers=headers)
        assert (await ws.connect())[0]
        assert await ws.receive_json_from(timeout=5) == {"type": "ready"}  # in the group
        await database_sync_to_async(_remove_from_support_staff)(person)
        await asyncio.sleep(0.5)  # the sign-in recheck runs
        await database_sync_to_async(realtime.publish)(
            STAFF_GROUP, {"type": "approvals.changed", "approval_id": 4242, "change": "requested"}
        )
        got = await _closed_or_silent(ws)
        await ws.disconnect()
        assert got.get("type") != "websocket.send", f"a user without the permission still receives: {got}"

    run(scenario)


def test_the_staff_ticket_socket_stops_once_the_user_may_no_longer_handle_tickets():
    ticket, _ = services.ticket_open(customer=make_customer(), subject="Kettle", body="Where is my kettle?")
    person = make_support_staff("li")
    headers = staff_headers(person)

    async def scenario() -> None:
        ws = staff_socket(ticket.pk, headers)
        assert (await ws.connect())[0]
        assert await ws.receive_json_from(timeout=5) == {"type": "ready"}  # in the group
        await database_sync_to_async(_remove_from_support_staff)(person)
        await asyncio.sleep(0.5)
        await database_sync_to_async(realtime.publish_event)(ticket.pk)
        got = await _closed_or_silent(ws)
        await ws.disconnect()
        assert got.get("type") != "websocket.send", f"a user without the permission still receives: {got}"

    run(scenario)


def test_the_approvals_socket_rechecks_a_sign_in_that_ended_without_a_notice(monkeypatch):
    """A session that ends without a sign-out notice (it expired, was cleared, or the notice was lost):
    ``SignedInConsumer`` promises a recheck before a read at most every SIGN_IN_RECHECK_SECONDS, and the
    customer's chat socket does so, and so do the staff sockets before they send."""
    from django.contrib.sessions.models import Session

    from support import websocket

    monkeypatch.setattr(websocket, "SIGN_IN_RECHECK_SECONDS", 0)
    person = make_support_staff("sam")
    headers = staff_headers(person)

    async def scenario() -> None:
        ws = WebsocketCommunicator(application, "/ws/staff/approvals/", headers=headers)
        assert (await ws.connect())[0]
        assert await ws.receive_json_from(timeout=5) == {"type": "ready"}  # in the group
        await database_sync_to_async(lambda: Session.objects.all().delete())()  # the session is gone, no notice
        await asyncio.sleep(0.1)
        await database_sync_to_async(realtime.publish)(
            STAFF_GROUP, {"type": "approvals.changed", "approval_id": 4343, "change": "requested"}
        )
        got = await _closed_or_silent(ws)
        await ws.disconnect()
        assert got.get("type") != "websocket.send", f"a socket whose session is gone still receives: {got}"

    run(scenario)
