"""The publisher hands pieces of an answer to the channel layer in order, without making the
worker wait (but for a step's first piece); pieces waiting behind each other go out joined,
never reordered or lost."""

from __future__ import annotations

import asyncio

import pytest
from channels.layers import get_channel_layer

from tickets import realtime

pytestmark = pytest.mark.django_db


def test_streamed_pieces_arrive_in_order_whole_and_joined_when_they_queue_up():
    ticket_id = 987_654
    words = [f"w{n} " for n in range(200)]

    async def watch() -> list[dict]:
        layer = get_channel_layer()
        channel = await layer.new_channel()
        await layer.group_add(realtime.group_name(ticket_id), channel)
        loop = asyncio.get_running_loop()

        def stream() -> None:
            offset = 0
            for word in words:
                realtime.stream_token(ticket_id, 7, offset, word)
                offset += len(word)
            realtime.publish_event(ticket_id)

        await loop.run_in_executor(None, stream)
        frames = []
        while not frames or frames[-1]["type"] != "ticket.event":
            frames.append(await asyncio.wait_for(layer.receive(channel), 10))
        await layer.group_discard(realtime.group_name(ticket_id), channel)
        return frames

    frames = asyncio.run(watch())
    tokens = frames[:-1]
    assert all(f["type"] == "ticket.token" and f["step"] == 7 for f in tokens)
    offset = 0
    for frame in tokens:  # contiguous: each piece starts where the one before ended
        assert frame["offset"] == offset
        offset += len(frame["text"])
    assert "".join(f["text"] for f in tokens) == "".join(words)
    assert len(tokens) <= len(words)
    realtime.stream_finished(ticket_id, 7)


class _SlowLayer:
    """A channel layer that takes a moment for each message, as a busy Redis would."""

    def __init__(self) -> None:
        self.sent: list[dict] = []

    async def group_send(self, group: str, message: dict) -> None:
        await asyncio.sleep(0.05)
        self.sent.append(message)


def test_a_steps_first_token_is_with_the_channel_layer_when_the_worker_goes_on(monkeypatch):
    """Its first piece, the customer's first token, does not wait for the worker's thread to let
    the publisher's run (the pieces after it are handed over without waiting)."""
    layer = _SlowLayer()
    monkeypatch.setattr(realtime, "get_channel_layer", lambda: layer)
    ticket_id = 987_655
    try:
        realtime.stream_token(ticket_id, 8, 0, "Hello")
        assert [m["text"] for m in layer.sent] == ["Hello"]
    finally:
        realtime.stream_finished(ticket_id, 8)
