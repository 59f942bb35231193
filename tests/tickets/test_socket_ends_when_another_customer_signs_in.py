"""A chat socket ends when another customer signs in on the same browser.

Signing in as someone else without signing out first (a shared computer: the next person uses the
sign-in page) ends the first customer's session, but Django says nothing of it (no sign-out is sent).
The first customer's chat tab, still open in that browser, must not go on receiving their
conversation: its socket is told and closes (4401: the page reconnects with the cookie it has now,
whose own check refuses a ticket that is not that customer's).
"""

from __future__ import annotations

import json

import pytest
from asgiref.sync import async_to_sync
from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator
from django.test import Client

from support.asgi import application
from tests.conftest import make_customer
from tests.workers import purge_stream_buffers
from tickets import services
from tickets.models import AuthorKind

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _no_stream_left_over() -> None:
    purge_stream_buffers()


async def _frames_until_quiet(ws: WebsocketCommunicator, quiet: float = 1.5) -> list[dict]:
    frames = []
    while not await ws.receive_nothing(timeout=quiet):
        output = await ws.receive_output(timeout=1)
        if output["type"] == "websocket.close":
            frames.append({"type": "closed", "code": output.get("code")})
            break
        frames.append(json.loads(output["text"]))
    return frames


def test_signing_in_as_another_customer_ends_the_first_customers_chat_socket():
    first, second = make_customer(), make_customer()
    ticket, _ = services.ticket_open(customer=first, subject="Kettle", body="Where is my kettle?")
    browser = Client()
    browser.force_login(first.user)
    cookie = browser.cookies["sessionid"].value
    headers = [(b"origin", b"http://127.0.0.1"), (b"host", b"127.0.0.1"), (b"cookie", f"sessionid={cookie}".encode())]

    async def scenario() -> list[dict]:
        ws = WebsocketCommunicator(application, f"/ws/tickets/{ticket.pk}/", headers=headers)
        assert (await ws.connect())[0]
        while (await ws.receive_json_from(timeout=5))["type"] != "ready":
            pass  # the conversation so far: the first customer is still signed in

        # The next person signs in on the same browser's sign-in page, without signing out first.
        signed_in = await database_sync_to_async(browser.post)(
            "/accounts/login/", {"username": second.user.username, "password": "pw-for-tests-123"}
        )
        assert signed_in.status_code == 302
        assert browser.cookies["sessionid"].value != cookie
        page = await database_sync_to_async(browser.get)(f"/tickets/{ticket.pk}/")
        assert page.status_code == 404  # the browser's pages no longer open the first customer's ticket

        await database_sync_to_async(services.message_post)(
            ticket=ticket.pk, author_kind=AuthorKind.STAFF, body="Your replacement ships to 12 Elm Street."
        )
        frames = await _frames_until_quiet(ws)
        await ws.disconnect()
        return frames

    frames = async_to_sync(scenario)()
    leaked = [f.get("text") for f in frames if f.get("type") == "event" and f.get("kind") == "message"]
    assert leaked == [], (
        f"the first customer's conversation still reaches the browser now signed in as another: {leaked}"
    )
    assert frames == [{"type": "closed", "code": 4401}]
