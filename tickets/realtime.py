"""Live updates for a ticket's watchers (the customer's chat, staff pages).

Two kinds of messages go to the Channels group ``ticket.<id>``:

- ``ticket.event``: a timeline event was committed (sent after commit);
- ``ticket.token``: a piece of the agent's answer as the model streams it.

The text streamed so far for the step in progress is also kept in Redis, so a
client that reconnects in the middle of an answer can be given what it missed.
That buffer is a convenience for the live view, never the ledger: the final
answer is a Message row.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from typing import Any

import redis
from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
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


_loop: asyncio.AbstractEventLoop | None = None
_loop_lock = threading.Lock()


def _publisher_loop() -> asyncio.AbstractEventLoop:
    """One event loop per process for publishing, so the channel layer keeps its Redis
    connections (async_to_sync would make a new loop, and new connections, per message)."""
    global _loop
    with _loop_lock:
        if _loop is None or _loop.is_closed():
            loop = asyncio.new_event_loop()
            threading.Thread(target=loop.run_forever, name="realtime-publisher", daemon=True).start()
            _loop = loop
        return _loop


def _send(ticket_id: int, message: dict[str, Any]) -> None:
    layer = get_channel_layer()
    if layer is None:
        return
    try:
        if _in_event_loop():
            async_to_sync(layer.group_send)(group_name(ticket_id), message)
        else:
            future = asyncio.run_coroutine_threadsafe(
                layer.group_send(group_name(ticket_id), message), _publisher_loop()
            )
            future.result(timeout=5)
    except Exception:  # noqa: BLE001 - live updates are best effort; the ledger has the truth
        logger.warning("could not publish to %s", group_name(ticket_id), exc_info=True)


def _in_event_loop() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


def publish_event(ticket_id: int) -> None:
    """The ticket's timeline moved (a doorbell: the watchers read what is new from the ledger)."""
    _send(ticket_id, {"type": "ticket.event"})


def stream_token(ticket_id: int, step_id: int, offset: int, text: str) -> None:
    """Publish one streamed piece of the answer; ``offset`` is its start in the step's text."""
    try:
        pipe = _client().pipeline()
        key = _stream_key(ticket_id)
        pipe.append(f"{key}:{step_id}", text)
        pipe.expire(f"{key}:{step_id}", STREAM_TTL_SECONDS)
        pipe.hset(key, "step", step_id)
        pipe.expire(key, STREAM_TTL_SECONDS)
        pipe.execute()
    except redis.RedisError:
        logger.warning("could not buffer streamed text for ticket %s", ticket_id, exc_info=True)
    _send(ticket_id, {"type": "ticket.token", "step": step_id, "offset": offset, "text": text})


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


def stream_text(ticket_id: int, step_id: int) -> str:
    try:
        text = _client().get(f"{_stream_key(ticket_id)}:{step_id}") or b""
    except redis.RedisError:
        return ""
    return text.decode()


def stream_finished(ticket_id: int, step_id: int) -> None:
    try:
        client = _client()
        key = _stream_key(ticket_id)
        client.delete(f"{key}:{step_id}")
        # Only clear the marker if it still names this step.
        if client.hget(key, "step") == str(step_id).encode():
            client.delete(key)
    except redis.RedisError:
        pass
