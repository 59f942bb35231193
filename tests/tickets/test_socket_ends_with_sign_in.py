"""A chat socket ends with the sign-in it was opened with.

A customer who signs out (a shared computer), or resets their password (a lost phone: every older
session stops opening pages), must not go on receiving the ticket's conversation on a socket opened
before: the socket is told and closes (4403), and sends nothing more (``SignedInConsumer``).
"""

from __future__ import annotations

import pytest
from asgiref.sync import async_to_sync
from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator
from django.test import Client

from support.asgi import application
from tests.workers import purge_stream_buffers
from tickets import services
from tickets.models import AuthorKind, Customer, Ticket

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _no_stream_left_over() -> None:
    purge_stream_buffers()


@pytest.fixture
def ticket(customer: Customer) -> Ticket:
    ticket, _ = services.ticket_open(customer=customer, subject="Kettle", body="Where is my kettle?")
    return ticket


async def _frames_until_quiet(ws: WebsocketCommunicator, quiet: float = 1.0) -> list[dict]:
    """What the socket sends until it is quiet for ``quiet`` seconds (a close as {"type": "closed"})."""
    frames = []
    while not await ws.receive_nothing(timeout=quiet):
        output = await ws.receive_output(timeout=1)
        if output["type"] == "websocket.close":
            frames.append({"type": "closed", "code": output.get("code")})
            break
        import json

        frames.append(json.loads(output["text"]))
    return frames


def test_a_signed_out_browser_stops_receiving_the_tickets_conversation(customer, ticket):
    client = Client()
    client.force_login(customer.user)
    cookie = client.cookies["sessionid"].value
    headers = [(b"origin", b"http://127.0.0.1"), (b"host", b"127.0.0.1"), (b"cookie", f"sessionid={cookie}".encode())]
    last = ticket.events.order_by("-seq").values_list("seq", flat=True).first()

    async def scenario() -> None:
        ws = WebsocketCommunicator(application, f"/ws/tickets/{ticket.pk}/?after={last}", headers=headers)
        connected, _ = await ws.connect()
        assert connected
        assert (await ws.receive_json_from(timeout=5))["type"] == "ready"

        # The customer presses "Sign out" (the header's POST form): the session is gone.
        response = await database_sync_to_async(client.post)("/accounts/logout/")
        assert response.status_code in (200, 302)
        assert "_auth_user_id" not in await database_sync_to_async(lambda: dict(client.session))()

        # A member of staff answers afterwards: personal details in a reply.
        await database_sync_to_async(services.message_post)(
            ticket=ticket.pk, author_kind=AuthorKind.STAFF, body="Your new card ending 4242 was charged $12.00."
        )
        # And the browser asks for everything again.
        await ws.send_json_to({"type": "resync"})
        frames = await _frames_until_quiet(ws)
        leaked = [f for f in frames if f.get("type") == "event" and f.get("kind") == "message"]
        await ws.disconnect()
        assert leaked == [], (
            "a browser whose session was signed out still receives the ticket's conversation over the chat "
            f"socket: {[f.get('text') for f in leaked]}"
        )

    async_to_sync(scenario)()


def test_a_password_reset_cuts_off_a_socket_opened_with_the_old_session(customer, ticket):
    """The customer suspects someone else is signed in (a lost phone) and resets their password:
    Django ends every other session (the session's auth hash no longer matches), yet the chat socket
    opened with such a session keeps getting the conversation."""
    client = Client()
    client.force_login(customer.user)
    cookie = client.cookies["sessionid"].value
    headers = [(b"origin", b"http://127.0.0.1"), (b"host", b"127.0.0.1"), (b"cookie", f"sessionid={cookie}".encode())]
    last = ticket.events.order_by("-seq").values_list("seq", flat=True).first()

    def reset_password() -> None:
        user = customer.user.__class__.objects.get(pk=customer.user_id)
        user.set_password("a-brand-new-password-771")
        user.save()

    async def scenario() -> None:
        ws = WebsocketCommunicator(application, f"/ws/tickets/{ticket.pk}/?after={last}", headers=headers)
        connected, _ = await ws.connect()
        assert connected
        assert (await ws.receive_json_from(timeout=5))["type"] == "ready"

        await database_sync_to_async(reset_password)()
        # The old session no longer opens a page.
        page = await database_sync_to_async(client.get)(f"/tickets/{ticket.pk}/")
        assert page.status_code in (302, 403, 404), page.status_code

        await database_sync_to_async(services.message_post)(
            ticket=ticket.pk, author_kind=AuthorKind.STAFF, body="Your replacement ships to 12 Elm Street."
        )
        frames = await _frames_until_quiet(ws)
        leaked = [f for f in frames if f.get("type") == "event" and f.get("kind") == "message"]
        await ws.disconnect()
        assert leaked == [], (
            "a socket opened with a session that the password reset ended still receives the ticket's "
            f"conversation: {[f.get('text') for f in leaked]}"
        )

    async_to_sync(scenario)()


def _socket_and_client(customer, ticket):  # noqa: ANN001, ANN202
    client = Client()
    client.force_login(customer.user)
    cookie = client.cookies["sessionid"].value
    headers = [(b"origin", b"http://127.0.0.1"), (b"host", b"127.0.0.1"), (b"cookie", f"sessionid={cookie}".encode())]
    last = ticket.events.order_by("-seq").values_list("seq", flat=True).first()
    return WebsocketCommunicator(application, f"/ws/tickets/{ticket.pk}/?after={last}", headers=headers), client


def test_the_socket_closes_when_the_account_is_deactivated_and_cannot_come_back(customer, ticket):
    ws, _ = _socket_and_client(customer, ticket)

    def deactivate() -> None:
        user = customer.user.__class__.objects.get(pk=customer.user_id)
        user.is_active = False
        user.save()

    async def scenario() -> list[dict]:
        assert (await ws.connect())[0]
        assert (await ws.receive_json_from(timeout=5))["type"] == "ready"
        await database_sync_to_async(deactivate)()
        frames = await _frames_until_quiet(ws)
        await ws.disconnect()
        return frames

    # Told to reconnect (4401: its sign-in no longer checks out), and the reconnection is refused.
    assert async_to_sync(scenario)() == [{"type": "closed", "code": 4401}]
    again, _ = _socket_and_client(customer, ticket)

    async def reconnect() -> dict:
        await again.connect()
        output = await again.receive_output(timeout=5)
        await again.disconnect()
        return output

    assert async_to_sync(reconnect)() == {"type": "websocket.close", "code": 4403}


def test_a_sign_out_just_after_redis_failed_a_live_update_still_ends_the_socket(customer, ticket):
    """Redis failed one live update of this web process a moment ago (live updates then pause for a
    few seconds, so that a stalled Redis costs one timeout, not one per streamed word): the customer
    signs out in that moment. The notice to the sockets opened with that session must still go; the
    streamed words of the next answer must not reach them."""
    from tickets import realtime

    client = Client()
    client.force_login(customer.user)
    cookie = client.cookies["sessionid"].value
    headers = [(b"origin", b"http://127.0.0.1"), (b"host", b"127.0.0.1"), (b"cookie", f"sessionid={cookie}".encode())]
    last = ticket.events.order_by("-seq").values_list("seq", flat=True).first()

    async def scenario() -> list[dict]:
        ws = WebsocketCommunicator(application, f"/ws/tickets/{ticket.pk}/?after={last}", headers=headers)
        assert (await ws.connect())[0]
        assert (await ws.receive_json_from(timeout=5))["type"] == "ready"
        realtime.live_updates_pause.failed()  # as after a live update Redis did not take
        try:
            response = await database_sync_to_async(client.post)("/accounts/logout/")
            assert response.status_code in (200, 302)
        finally:
            realtime.live_updates_pause.lift()
        # The worker (another process, its own connection to Redis) streams the next answer.
        await database_sync_to_async(realtime.stream_token)(ticket.pk, 7001, 0, "Your card ending 4242 ")
        frames = await _frames_until_quiet(ws)
        await ws.disconnect()
        return frames

    assert async_to_sync(scenario)() == [{"type": "closed", "code": 4403}]
