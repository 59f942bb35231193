"""A customer whose chat socket lands on a web server cut off from Redis still reads the answers.

Live updates come through Redis (the Channels layer); PostgreSQL, where every answer is stored, is
still reached. The socket joined its groups in Redis before it said anything: on a web server that
could not reach Redis the join failed, the socket closed, the page reconnected to the same failure
again and again, and the customer saw "connection lost" and no answer until they reloaded, though
the server could read every answer from the ledger (as a quiet socket does when its rings are lost).
"""

from __future__ import annotations

from typing import Any

import pytest
from channels.db import database_sync_to_async
from django.test import override_settings

from tests.tickets.test_consumer import run, session_cookie, socket, until_ready
from tickets import services
from tickets.models import AuthorKind

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(90)]

# Nothing listens on port 1: every Redis command of the layer fails, as on a host cut off from it.
UNREACHABLE = {
    "default": {
        "BACKEND": "channels_redis.pubsub.RedisPubSubChannelLayer",
        "CONFIG": {"hosts": [{"address": "redis://127.0.0.1:1/0", "socket_timeout": 2, "socket_connect_timeout": 2}]},
    }
}


def test_the_chat_on_a_web_server_cut_from_redis_opens_and_shows_the_answer_from_the_ledger(customer, monkeypatch):  # noqa: ANN001
    monkeypatch.setattr("support.websocket.QUIET_CHECK_SECONDS", 0.5, raising=False)
    ticket, _ = services.ticket_open(customer=customer, subject="Kettle", body="Where is my kettle?")
    headers = session_cookie(customer)
    heard: list[dict[str, Any]] = []

    async def scenario() -> None:
        ws = socket(ticket.pk, after=0, headers=headers)
        connected, _ = await ws.connect(timeout=20)
        assert connected
        try:
            await until_ready(ws)
        except AssertionError as exc:  # the socket closed instead of saying it is ready
            raise AssertionError(f"the chat socket closed on a web server cut from Redis: {exc!r}") from exc
        await database_sync_to_async(services.message_post)(
            ticket=ticket.pk, author_kind=AuthorKind.AGENT, body="It left today.", client_msg_id="reply:1:0"
        )
        while not await ws.receive_nothing(timeout=15):
            heard.append(await ws.receive_json_from())
            if heard[-1].get("kind") == "message" and heard[-1].get("text") == "It left today.":
                break
        await ws.disconnect()

    with override_settings(CHANNEL_LAYERS=UNREACHABLE):
        run(scenario)

    assert "It left today." in [f.get("text") for f in heard if f.get("kind") == "message"], (
        f"the answer stored in the ledger never reached the chat on a web server cut from Redis: it heard {heard}"
    )
