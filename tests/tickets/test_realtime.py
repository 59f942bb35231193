"""Live updates go out through the channel layer's own Pub/Sub channels, one PUBLISH each, from the
worker's thread: a socket in the ticket's group gets every piece of an answer, in order and whole,
and the doorbells after them."""

from __future__ import annotations

import asyncio
import time

import pytest
import redis
from channels.layers import channel_layers, get_channel_layer
from django.test import override_settings

from tickets import realtime

pytestmark = pytest.mark.django_db


def _watch(ticket_id: int, act) -> list[dict]:
    """Join the ticket's group through the layer (as a chat socket does), run ``act`` in a thread,
    and collect what arrives until a doorbell."""

    async def watch() -> list[dict]:
        layer = get_channel_layer()
        channel = await layer.new_channel()
        await layer.group_add(realtime.group_name(ticket_id), channel)
        try:
            await asyncio.get_running_loop().run_in_executor(None, act)
            frames = []
            while not frames or frames[-1]["type"] != "ticket.event":
                frames.append(await asyncio.wait_for(layer.receive(channel), 10))
            return frames
        finally:
            await layer.group_discard(realtime.group_name(ticket_id), channel)

    return asyncio.run(watch())


def test_streamed_pieces_reach_a_socket_in_the_group_in_order_and_whole():
    ticket_id = 987_654
    words = [f"w{n} " for n in range(200)]

    def stream() -> None:
        offset = 0
        for word in words:
            realtime.stream_token(ticket_id, 7, offset, word)
            offset += len(word)
        realtime.publish_event(ticket_id)

    try:
        frames = _watch(ticket_id, stream)
        assert frames[-1] == {"type": "ticket.event"}
        offsets = [sum(map(len, words[:n])) for n in range(len(words))]
        assert frames[:-1] == [
            {"type": "ticket.token", "step": 7, "offset": offset, "text": word}
            for offset, word in zip(offsets, words, strict=True)
        ]
        assert realtime.streamed_so_far(ticket_id) == (7, "".join(words))  # the buffer for a late socket
    finally:
        realtime.stream_finished(ticket_id, 7)
    assert realtime.streamed_so_far(ticket_id) == (None, "")


def test_with_another_channel_layer_the_updates_go_through_its_group_send():
    """An operator may configure another layer: then the layer's own group_send carries them."""
    layers = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}
    with override_settings(CHANNEL_LAYERS=layers):
        channel_layers.backends.pop("default", None)
        try:
            frames = _watch(
                987_656, lambda: realtime.stream_token(987_656, 9, 0, "Hi") or realtime.publish_event(987_656)
            )
        finally:
            channel_layers.backends.pop("default", None)
            realtime.stream_finished(987_656, 9)
    assert frames == [{"type": "ticket.token", "step": 9, "offset": 0, "text": "Hi"}, {"type": "ticket.event"}]


def test_updates_go_out_on_one_connection_that_redis_never_answers():
    """The worker does not wait a round trip per update: Redis sends nothing back on it."""
    frames = _watch(987_658, lambda: [realtime.publish_event(987_658) for _ in range(3)])
    assert frames == [{"type": "ticket.event"}]  # the first doorbell ends the watch
    writer = realtime._writer
    assert writer is not None and writer.replies_off is True
    assert not writer.connection.can_read(timeout=0.2)


def test_a_connection_redis_dropped_is_opened_again_before_the_next_update():
    realtime.publish_event(987_659)
    host, port = realtime._writer.connection._sock.getsockname()[:2]
    address = f"{host}:{port}"
    assert realtime._client().client_kill(address)  # as a Redis restart or an idle timeout would
    time.sleep(realtime.IDLE_CHECK_SECONDS)  # (a connection in use is not looked at before each write)
    frames = _watch(987_659, lambda: realtime.publish_event(987_659))
    assert frames == [{"type": "ticket.event"}]


def test_a_redis_that_refuses_to_turn_replies_off_gets_the_updates_with_replies(monkeypatch, caplog):
    import redis

    def refused(self):
        self.replies_off = False
        raise redis.ResponseError("unknown subcommand 'REPLY'")

    monkeypatch.setattr(realtime, "_writer", None)
    monkeypatch.setattr(realtime._Writer, "_connected", refused)
    try:
        frames = _watch(987_660, lambda: realtime.stream_token(987_660, 4, 0, "Hi") or realtime.publish_event(987_660))
        assert frames == [{"type": "ticket.token", "step": 4, "offset": 0, "text": "Hi"}, {"type": "ticket.event"}]
        assert realtime.streamed_so_far(987_660) == (4, "Hi")
    finally:
        realtime.stream_finished(987_660, 4)
    assert realtime.streamed_so_far(987_660) == (None, "")


def test_an_unreachable_redis_loses_the_live_update_and_nothing_else(monkeypatch, caplog):
    """The worker goes on: streaming and doorbells are best effort, the ledger has the truth."""
    import redis

    monkeypatch.setattr(realtime._client, "client", redis.Redis(host="127.0.0.1", port=1, socket_connect_timeout=0.2))
    monkeypatch.setattr(realtime, "_writer", None)
    realtime.stream_token(987_657, 3, 0, "Hello")
    realtime.publish_event(987_657)
    assert [r.getMessage() for r in caplog.records if r.levelname == "WARNING"] == [
        "could not send a piece of the answer for ticket 987657",
        "could not send a live update to ticket.987657",
    ]


def test_a_web_process_keeps_listening_after_its_last_socket_leaves():
    """The Pub/Sub layer's reader sleeps 0.1 s at a time while its process listens to nothing; the
    first socket to join keeps one channel of the process open, so the next socket's first update
    (a customer's first token) is read at once."""

    async def join_and_leave() -> list[str]:
        layer = get_channel_layer()
        channel = await layer.new_channel()
        await realtime.group_join(layer, realtime.group_name(987_661), channel)
        await layer.group_discard(realtime.group_name(987_661), channel)
        return [name for name in layer._get_layer().channels if name != channel]

    kept = asyncio.run(join_and_leave())
    assert len(kept) == 1 and "listening." in kept[0], kept


@pytest.mark.parametrize(
    "commands",
    [
        [("PUBLISH", "asgi__group__ticket-1", b"\x81\xa4type\xactoken")],
        [("SET", "k\u00e9y", "v\u2603", "PX", 3600000), ("EVALSHA", "abc", 2, "a", "b", 1.5, b"")],
    ],
    ids=["publish", "several-with-numbers-and-unicode"],
)
def test_live_updates_are_packed_as_redis_py_packs_them(commands):
    from redis.connection import Connection

    assert realtime.packed(commands) == b"".join(Connection().pack_commands(commands))


def test_packing_refuses_what_redis_py_refuses():
    with pytest.raises(redis.DataError):
        realtime.packed([("SET", "k", True)])
    with pytest.raises(redis.DataError):
        realtime.packed([("SET", "k", None)])
