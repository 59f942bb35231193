"""Live updates for a ticket's watchers (the customer's chat, staff pages).

Two kinds of messages go to the Channels group ``ticket.<id>``:

- ``ticket.event``: a timeline event was committed (sent after commit);
- ``ticket.token``: a piece of the agent's answer as the model streams it.

The channel layer is channels_redis's Pub/Sub layer: a group is one Redis Pub/Sub channel that
each web process subscribes to while one of its sockets is in the group. A message is therefore
one PUBLISH, sent here from the calling thread with the layer's own serializer: no event loop,
no thread and no queue in the worker, and nothing kept in Redis for a group nobody watches.

The text streamed so far for the step in progress is also kept in Redis, so a
client that reconnects in the middle of an answer can be given what it missed.
That buffer is a convenience for the live view, never the ledger: the final
answer is a Message row.
"""

from __future__ import annotations

import logging
from typing import Any

import redis
from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from channels_redis.pubsub import RedisPubSubChannelLayer
from django.conf import settings

logger = logging.getLogger(__name__)
STREAM_TTL_SECONDS = 3600

_redis: redis.Redis | None = None


def _client() -> redis.Redis:
    global _redis
    if _redis is None:
        _redis = redis.Redis.from_url(settings.REDIS_URL, socket_timeout=2, socket_connect_timeout=2)
    return _redis


def group_name(ticket_id: int) -> str:
    return f"ticket.{ticket_id}"


def _stream_key(ticket_id: int) -> str:
    return f"{getattr(settings, 'CHANNELS_PREFIX', 'asgi')}:stream:{ticket_id}"


def _pubsub_channel(group: str) -> str:
    """The Redis channel RedisPubSubChannelLayer subscribes a group's sockets to (its
    ``_get_group_channel_name``; tests/tickets/test_realtime.py holds the two together)."""
    prefix = settings.CHANNEL_LAYERS["default"].get("CONFIG", {}).get("prefix", "asgi")
    return f"{prefix}__group__{group}"


def _queue_publish(pipe: Any, group: str, message: dict[str, Any]) -> bool:
    """Add the PUBLISH of ``message`` to ``pipe``; False if the layer is not the Pub/Sub one (then
    the caller sends through the layer itself, see ``publish``)."""
    layer = get_channel_layer()
    if not isinstance(layer, RedisPubSubChannelLayer):
        return False
    pipe.publish(_pubsub_channel(group), layer.serialize(message))
    return True


def publish(group: str, message: dict[str, Any]) -> None:
    """Send ``message`` to the group's watchers now, from this thread: one round trip to Redis.
    Best effort: live updates may be lost, the ledger has the truth."""
    try:
        client = _client()
        if _queue_publish(client, group, message):
            return
        layer = get_channel_layer()
        if layer is not None:  # another layer (configured by an operator): its own group_send
            async_to_sync(layer.group_send)(group, message)
    except Exception:  # noqa: BLE001 - live updates are best effort; the ledger has the truth
        logger.warning("could not publish to %s", group, exc_info=True)


def publish_event(ticket_id: int) -> None:
    """The ticket's timeline moved (a doorbell: the watchers read what is new from the ledger)."""
    publish(group_name(ticket_id), {"type": "ticket.event"})


def stream_token(ticket_id: int, step_id: int, offset: int, text: str) -> None:
    """Buffer one streamed piece of the answer and publish it; ``offset`` is its start in the
    step's text. One round trip: the piece is appended and published in one pipeline."""
    key = _stream_key(ticket_id)
    message = {"type": "ticket.token", "step": step_id, "offset": offset, "text": text}
    try:
        pipe = _client().pipeline(transaction=False)
        pipe.append(f"{key}:{step_id}", text)
        if not offset:  # the keys expire from the first piece
            pipe.expire(f"{key}:{step_id}", STREAM_TTL_SECONDS)
            pipe.hset(key, "step", step_id)
            pipe.expire(key, STREAM_TTL_SECONDS)
        published = _queue_publish(pipe, group_name(ticket_id), message)
        pipe.execute()
    except redis.RedisError:
        logger.warning("could not stream a piece of the answer for ticket %s", ticket_id, exc_info=True)
        return
    if not published:
        publish(group_name(ticket_id), message)


def streamed_so_far(ticket_id: int) -> tuple[int | None, str]:
    """The step being streamed for this ticket and its text so far, if any."""
    try:
        client = _client()
        key = _stream_key(ticket_id)
        step = client.hget(key, "step")
        if step is None:
            return None, ""
        text = client.get(f"{key}:{int(step)}") or b""
        return int(step), text.decode()
    except redis.RedisError:
        return None, ""


# The step's text goes, and the marker too if it still names this step: one round trip.
_FINISH = """
redis.call('DEL', KEYS[2])
if redis.call('HGET', KEYS[1], 'step') == ARGV[1] then redis.call('DEL', KEYS[1]) end
"""
_finish_script: Any = None


def stream_finished(ticket_id: int, step_id: int) -> None:
    global _finish_script
    try:
        client = _client()
        if _finish_script is None:
            _finish_script = client.register_script(_FINISH)
        key = _stream_key(ticket_id)
        _finish_script(keys=[key, f"{key}:{step_id}"], args=[str(step_id)], client=client)
    except redis.RedisError:
        pass
