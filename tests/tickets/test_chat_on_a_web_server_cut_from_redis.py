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
from tickets import realtime, services
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


def test_a_chat_opened_while_redis_was_away_gets_live_updates_again_once_it_answers(customer, monkeypatch):  # noqa: ANN001
    """The socket opened without live updates does not stay so: once Redis answers, it closes with a
    code the page reconnects on, and the new socket catches up on what was posted meanwhile and hears
    the answer streamed live (which only comes through Redis)."""
    monkeypatch.setattr("support.websocket.LAYER_RETRY_SECONDS", 0.5, raising=False)
    ticket, _ = services.ticket_open(customer=customer, subject="Kettle", body="Where is my kettle?")
    headers = session_cookie(customer)
    step_id = 880101
    heard: list[dict[str, Any]] = []

    async def scenario() -> None:
        cut_off = override_settings(CHANNEL_LAYERS=UNREACHABLE)
        cut_off.enable()
        try:
            ws = socket(ticket.pk, after=0, headers=headers)
            connected, _ = await ws.connect(timeout=20)
            assert connected
            frames = await until_ready(ws)
            last_seq = max(f["seq"] for f in frames if f["type"] == "event")
            await database_sync_to_async(services.message_post)(
                ticket=ticket.pk, author_kind=AuthorKind.AGENT, body="Let me look.", client_msg_id="reply:1:0"
            )
        finally:
            cut_off.disable()  # Redis answers again
        closed = None
        for _ in range(40):
            try:
                output = await ws.receive_output(timeout=15)
            except TimeoutError:
                break
            if output["type"] == "websocket.close":
                closed = output
                break
        assert closed is not None and closed.get("code") not in (4403, 4404), (
            f"a socket opened while Redis was away was not closed for a reconnect once Redis answered: {closed}"
        )
        again = socket(ticket.pk, after=last_seq, headers=headers)
        connected, _ = await again.connect(timeout=20)
        assert connected
        heard.extend(await until_ready(again))
        await database_sync_to_async(realtime.stream_token)(ticket.pk, step_id, 0, "It left ")
        heard.append(await again.receive_json_from(timeout=5))
        await again.disconnect()

    try:
        run(scenario)
    finally:
        realtime.stream_finished(ticket.pk, step_id)
    assert "Let me look." in [f.get("text") for f in heard if f.get("kind") == "message"], heard
    assert {"type": "token", "step": step_id, "offset": 0, "text": "It left "} in heard, heard
