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
import collections
import logging
import os
import threading
from typing import Any

import redis
from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.conf import settings

logger = logging.getLogger(__name__)
STREAM_TTL_SECONDS = 3600
# How long a step's first token may hold up the worker on its way out (live updates are best effort).
FIRST_TOKEN_WAIT_SECONDS = 0.25

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


class _Publisher:
    """One event loop per process publishes to the channel layer, in order, without making the
    caller wait: a worker streaming an answer hands each piece over and goes on (a step's first
    piece excepted, see ``stream_token``). The channel layer keeps its Redis connections across
    messages (async_to_sync would open new ones). Live updates are best effort; the ledger has
    the truth."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        # (group, message, set once it has been handed to the channel layer, if anyone waits)
        self.waiting: collections.deque[tuple[str, dict[str, Any], threading.Event | None]] = collections.deque()
        self.ready = asyncio.Event()
        # Set by the loop before it waits for work: only then does a caller wake it (a wake-up is a
        # write to the loop's socket; a loop busy publishing finds the new work by itself).
        self.sleeping = False
        self.pid = os.getpid()
        threading.Thread(target=self._run, name="realtime-publisher", daemon=True).start()

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_until_complete(self._drain())

    def _take(self) -> tuple[str, dict[str, Any], list[threading.Event]]:
        """The next message; pieces of one answer already waiting behind it join it, as one frame
        (fewer messages for the channel layer and the browser when the model streams faster)."""
        group, message, sent = self.waiting.popleft()
        waiters = [sent] if sent is not None else []
        while message.get("type") == "ticket.token" and self.waiting:
            next_group, following, also_sent = self.waiting[0]
            if (
                next_group != group
                or following.get("type") != "ticket.token"
                or following["step"] != message["step"]
                or following["offset"] != message["offset"] + len(message["text"])
            ):
                break
            self.waiting.popleft()
            message = {**message, "text": message["text"] + following["text"]}
            if also_sent is not None:
                waiters.append(also_sent)
        return group, message, waiters

    async def _drain(self) -> None:
        while True:
            if not self.waiting:
                self.sleeping = True
                self.ready.clear()
                if self.waiting:  # came in before ``sleeping`` was seen: no wake-up was sent for it
                    self.sleeping = False
                    continue
                await self.ready.wait()
                continue
            group, message, waiters = self._take()
            try:
                layer = get_channel_layer()
                if layer is not None:
                    await layer.group_send(group, message)
            except Exception:  # noqa: BLE001 - best effort, see above
                logger.warning("could not publish to %s", group, exc_info=True)
            finally:
                for sent in waiters:
                    sent.set()

    def put(self, group: str, message: dict[str, Any], *, wait: float = 0) -> None:
        """Queue the message; with ``wait``, block (at most that many seconds) until it is handed
        to the channel layer."""
        sent = threading.Event() if wait else None
        self.waiting.append((group, message, sent))  # deque appends are atomic; the loop pops
        if self.sleeping:
            self.sleeping = False
            self.loop.call_soon_threadsafe(self.ready.set)
        if sent is not None:
            sent.wait(wait)


_publisher: _Publisher | None = None
_publisher_lock = threading.Lock()


def _the_publisher() -> _Publisher:
    global _publisher
    with _publisher_lock:
        if _publisher is None or _publisher.pid != os.getpid():  # a forked child starts its own
            _publisher = _Publisher()
        return _publisher


def _send(ticket_id: int, message: dict[str, Any], *, wait: float = 0) -> None:
    if _in_event_loop():
        layer = get_channel_layer()
        if layer is None:
            return
        try:
            async_to_sync(layer.group_send)(group_name(ticket_id), message)
        except Exception:  # noqa: BLE001 - live updates are best effort; the ledger has the truth
            logger.warning("could not publish to %s", group_name(ticket_id), exc_info=True)
        return
    _the_publisher().put(group_name(ticket_id), message, wait=wait)


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
        key = _stream_key(ticket_id)
        if offset:
            _client().append(f"{key}:{step_id}", text)  # one command; the keys expire from the first piece
        else:
            pipe = _client().pipeline(transaction=False)
            pipe.append(f"{key}:{step_id}", text)
            pipe.expire(f"{key}:{step_id}", STREAM_TTL_SECONDS)
            pipe.hset(key, "step", step_id)
            pipe.expire(key, STREAM_TTL_SECONDS)
            pipe.execute()
    except redis.RedisError:
        logger.warning("could not buffer streamed text for ticket %s", ticket_id, exc_info=True)
    # The first piece of a step is on its way to the watchers before the caller goes on: the
    # publisher's thread would otherwise wait for the interpreter while the worker's thread works
    # (the rest of the answer, the step's rows), and the customer's first token with it.
    _send(
        ticket_id,
        {"type": "ticket.token", "step": step_id, "offset": offset, "text": text},
        wait=FIRST_TOKEN_WAIT_SECONDS if offset == 0 else 0,
    )


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
