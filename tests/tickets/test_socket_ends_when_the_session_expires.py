"""A chat socket ends when the session it was opened with expires.

A session that expires sends no notice (nobody signs out): the socket itself knows when its session
ends, and closes then (4403: the page says "You were signed out" with a sign-in link). Neither the
words of an answer being streamed nor the conversation reach a browser whose session is over.
"""

from __future__ import annotations

import pytest
from asgiref.sync import async_to_sync
from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator
from django.contrib.sessions.models import Session
from django.test import Client
from django.utils import timezone

from support.asgi import application
from tests.tickets.test_socket_ends_with_sign_in import _frames_until_quiet, _no_stream_left_over  # noqa: F401 (a fixture)
from tests.workers import wait_until
from tickets import realtime, services
from tickets.models import AuthorKind, Customer, Ticket

pytestmark = pytest.mark.django_db(transaction=True)

SESSION_SECONDS = 3


@pytest.fixture
def ticket(customer: Customer) -> Ticket:
    ticket, _ = services.ticket_open(customer=customer, subject="Kettle", body="Where is my kettle?")
    return ticket


def _socket_with_a_short_session(customer: Customer, ticket: Ticket, seconds: int) -> tuple[WebsocketCommunicator, str]:
    client = Client()
    client.force_login(customer.user)
    session = client.session
    session.set_expiry(seconds)  # as a site with short sessions (or a session near its end) has it
    session.save()
    key = client.cookies["sessionid"].value
    headers = [(b"origin", b"http://127.0.0.1"), (b"host", b"127.0.0.1"), (b"cookie", f"sessionid={key}".encode())]
    last = ticket.events.order_by("-seq").values_list("seq", flat=True).first()
    return WebsocketCommunicator(application, f"/ws/tickets/{ticket.pk}/?after={last}", headers=headers), key


def _expired(key: str) -> bool:
    return not Session.objects.filter(session_key=key, expire_date__gt=timezone.now()).exists()


def test_a_socket_whose_session_expired_gets_no_more_words_and_closes(customer, ticket):
    ws, key = _socket_with_a_short_session(customer, ticket, SESSION_SECONDS)

    async def scenario() -> list[dict]:
        assert (await ws.connect())[0]
        assert (await ws.receive_json_from(timeout=5))["type"] == "ready"
        await database_sync_to_async(wait_until)(
            lambda: _expired(key), timeout=SESSION_SECONDS + 10, what="the session to expire"
        )
        # The agent goes on answering, and a person writes: none of it is for this browser any more.
        await database_sync_to_async(realtime.stream_token)(ticket.pk, 9001, 0, "Your card ending 4242 ")
        await database_sync_to_async(services.message_post)(
            ticket=ticket.pk, author_kind=AuthorKind.STAFF, body="Your replacement ships to 12 Elm Street."
        )
        frames = await _frames_until_quiet(ws)
        await ws.disconnect()
        return frames

    frames = async_to_sync(scenario)()
    assert frames == [{"type": "closed", "code": 4403}], (
        f"a socket whose session expired is sent, instead of being closed as signed out: {frames}"
    )


def test_a_quiet_socket_closes_when_its_session_expires(customer, ticket):
    """Nothing to send: the page still learns at once that it is signed out (its status says so, and
    its next message would not be taken)."""
    ws, key = _socket_with_a_short_session(customer, ticket, SESSION_SECONDS)

    async def scenario() -> dict:
        assert (await ws.connect())[0]
        assert (await ws.receive_json_from(timeout=5))["type"] == "ready"
        await database_sync_to_async(wait_until)(
            lambda: _expired(key), timeout=SESSION_SECONDS + 10, what="the session to expire"
        )
        output = await ws.receive_output(timeout=5)
        await ws.disconnect()
        return output

    assert async_to_sync(scenario)() == {"type": "websocket.close", "code": 4403}


def test_a_session_renewed_before_its_end_keeps_its_socket(customer, ticket):
    """The session's end moved on (the site saved it again with a later expiry): the socket stays."""
    ws, key = _socket_with_a_short_session(customer, ticket, SESSION_SECONDS)

    def renew() -> None:
        from support.sessions import SessionStore

        session = SessionStore(key)
        session.set_expiry(3600)
        session.save()

    async def scenario() -> list[dict]:
        assert (await ws.connect())[0]
        assert (await ws.receive_json_from(timeout=5))["type"] == "ready"
        await database_sync_to_async(renew)()
        await database_sync_to_async(wait_until)(
            lambda: timezone.now().timestamp() > ws_opened + SESSION_SECONDS + 1,
            timeout=SESSION_SECONDS + 10,
            what="the session's first end to pass",
        )
        await database_sync_to_async(realtime.stream_token)(ticket.pk, 9002, 0, "Still here")
        frames = await _frames_until_quiet(ws)
        await ws.disconnect()
        return frames

    ws_opened = timezone.now().timestamp()
    frames = async_to_sync(scenario)()
    assert frames == [{"type": "token", "step": 9002, "offset": 0, "text": "Still here"}]
