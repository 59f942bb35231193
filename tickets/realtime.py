"""Live updates for a ticket's watchers (the customer's chat, staff pages).

Two kinds of messages go to the Channels group ``ticket.<id>``:

- ``ticket.event``: a timeline event was committed (sent after commit);
- ``ticket.token``: a piece of the agent's answer as the model streams it.

The channel layer is channels_redis's Pub/Sub layer: a group is one Redis Pub/Sub channel that
each web process subscribes to while one of its sockets is in the group. A message is therefore
one PUBLISH, made here with the layer's own serializer (no event loop in the worker), and nothing
is kept in Redis for a group nobody watches.

The updates of a process are written, in order, to one connection on which Redis sends no
replies (``CLIENT REPLY OFF``): the worker goes on at once instead of waiting a round trip per
update. They are best effort: an error is not reported back, and an update written to a
connection Redis has just dropped is lost. The ledger has the truth; a watcher that missed
something reads it from there.

The text streamed so far for the step in progress is also kept in Redis, so a
client that reconnects in the middle of an answer can be given what it missed.
That buffer is a convenience for the live view, never the ledger: the final
answer is a Message row.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import time
from typing import Any

import redis
from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from channels_redis.pubsub import RedisPubSubChannelLayer
from django.conf import settings

from support.pauses import Pause
from support.redis_client import LazyRedis

logger = logging.getLogger(__name__)
STREAM_TTL_SECONDS = 3600
# A connection for live updates idle this long is checked before it is written to (see _Writer).
IDLE_CHECK_SECONDS = 0.5

_client = LazyRedis(timeout=2)


def group_name(ticket_id: int) -> str:
    return f"ticket.{ticket_id}"


def _stream_key(ticket_id: int) -> str:
    return f"{getattr(settings, 'CHANNELS_PREFIX', 'asgi')}:stream:{ticket_id}"


def _pubsub_channel(group: str) -> str:
    """The Redis channel RedisPubSubChannelLayer subscribes a group's sockets to (its
    ``_get_group_channel_name``; tests/tickets/test_realtime.py holds the two together)."""
    prefix = settings.CHANNEL_LAYERS["default"].get("CONFIG", {}).get("prefix", "asgi")
    return f"{prefix}__group__{group}"


Command = tuple[Any, ...]


def _argument(value: Any) -> bytes:
    # As redis-py's Encoder: bytes as they are, text as UTF-8, numbers by repr, nothing else.
    if isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode()
    if isinstance(value, int | float) and not isinstance(value, bool):
        return repr(value).encode()
    raise redis.DataError(f"Invalid input of type: {type(value).__name__!r}")


def packed(commands: list[Command]) -> bytes:
    """The commands in Redis's protocol, in one buffer: what ``pack_commands`` sends, without its
    general machinery (a few small commands per step, on the hot path)."""
    out = []
    for command in commands:
        out.append(b"*%d\r\n" % len(command))
        for value in map(_argument, command):
            out.append(b"$%d\r\n%b\r\n" % (len(value), value))
    return b"".join(out)


class _Writer:
    """This process's connection for live updates, on which Redis sends no replies."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.pid = os.getpid()
        self.connection: Any = None
        self.replies_off: bool | None = None  # None until the server was asked
        self.last_write = 0.0

    def write(self, commands: list[Command]) -> None:
        with self.lock:
            for attempt in (1, 2):
                try:
                    self._connected().send_packed_command([packed(commands)], check_health=False)
                    return
                except redis.RedisError as exc:
                    self._drop()
                    # Tried again on a connection Redis closed (a restart); not after a timeout: a
                    # server that does not answer would only make the worker wait twice as long.
                    if attempt == 2 or isinstance(exc, redis.TimeoutError):
                        raise

    def _connected(self) -> Any:
        now = time.monotonic()
        if self.connection is not None:
            # Nothing is ever sent back on this connection: something to read means it is closed.
            # Redis drops a connection when it restarts or times an idle one out, so one that has
            # been idle is looked at before a write; one in use (a step a millisecond) is not.
            idle, self.last_write = now - self.last_write, now
            if idle < IDLE_CHECK_SECONDS or not self.connection.can_read(timeout=0):
                return self.connection
            self._drop()
        self.last_write = now
        client = _client()
        connection = client.connection_pool.make_connection()
        try:
            connection.connect()
            # Asked once with a reply first: a server that refuses CLIENT REPLY (some hosted ones)
            # would otherwise answer every update into a socket nobody reads.
            connection.send_command("CLIENT", "REPLY", "ON", check_health=False)
            connection.read_response()
            connection.send_command("CLIENT", "REPLY", "OFF", check_health=False)
        except redis.ResponseError:
            connection.disconnect()
            self.replies_off = False
            raise
        except BaseException:
            connection.disconnect()
            raise
        self.replies_off = True
        self.connection = connection
        return connection

    def _drop(self) -> None:
        if self.connection is not None:
            self.connection.disconnect()
        self.connection = None


_writer: _Writer | None = None
_writer_lock = threading.Lock()


# After Redis failed a live update, the next ones are not tried for this long: a Redis that stalls
# (stopped, overloaded, cut off without a reset) costs a worker one timeout, not one per streamed
# word. Live updates are best effort; the answer is in the ledger.
LIVE_UPDATES_PAUSE_SECONDS = 5.0
live_updates_pause = Pause("live updates", LIVE_UPDATES_PAUSE_SECONDS)


def _write(commands: list[Command], *, even_when_paused: bool = False) -> None:
    """Send the commands in one write on the no-reply connection (with replies, on a server that
    refuses to turn them off). Raises at once, sending nothing, while live updates are paused after
    a failure (unless ``even_when_paused``)."""
    if live_updates_pause.paused() and not even_when_paused:
        raise redis.ConnectionError("live updates are paused after Redis failed to answer")
    try:
        _write_now(commands)
    except redis.RedisError:
        live_updates_pause.failed()
        raise


def _write_now(commands: list[Command]) -> None:
    global _writer
    writer = _writer
    if writer is None or writer.pid != os.getpid():  # a forked child opens its own
        with _writer_lock:
            if _writer is None or _writer.pid != os.getpid():
                _writer = _Writer()
            writer = _writer
    if writer.replies_off is not False:
        try:
            writer.write(commands)
            return
        except redis.ResponseError:
            logger.info("Redis does not turn replies off (CLIENT REPLY): live updates wait for them")
    pipe = _client().pipeline(transaction=False)
    for command in commands:
        pipe.execute_command(*command)
    pipe.execute()


def _publish_command(group: str, message: dict[str, Any]) -> Command | None:
    """The PUBLISH of ``message`` to the group; None if the layer is not the Pub/Sub one (then it
    is sent through the layer itself, see ``publish``)."""
    layer = get_channel_layer()
    if not isinstance(layer, RedisPubSubChannelLayer):
        return None
    return ("PUBLISH", _pubsub_channel(group), layer.serialize(message))


def _send(
    commands: list[Command], group: str, message: dict[str, Any], what: str, *, even_when_paused: bool = False
) -> None:
    publish = _publish_command(group, message)
    try:
        _write([*commands, publish] if publish is not None else commands, even_when_paused=even_when_paused)
        if publish is None:
            layer = get_channel_layer()
            if layer is not None:  # another layer (configured by an operator): its own group_send
                async_to_sync(layer.group_send)(group, message)
    except Exception:  # noqa: BLE001 - live updates are best effort; the ledger has the truth
        logger.warning("could not send %s", what, exc_info=True)


_kept_listening: set[int] = set()  # the event loops whose layer keeps a channel of its own


async def group_join(layer: Any, group: str, channel: str) -> None:
    """Add a socket's channel to a group. The first time in an event loop, the layer is also given a
    channel that is never left: the Pub/Sub layer's reader sleeps 0.1 s at a time while its process
    listens to nothing, so the first update for the next socket after a quiet moment waited that
    long (a customer's first token among them)."""
    loop = id(asyncio.get_running_loop())
    if isinstance(layer, RedisPubSubChannelLayer) and loop not in _kept_listening:
        _kept_listening.add(loop)
        await layer.new_channel(prefix="listening.")
    await layer.group_add(group, channel)


def publish(group: str, message: dict[str, Any]) -> None:
    """Send ``message`` to the group's watchers (best effort: the ledger has the truth)."""
    _send([], group, message, f"a live update to {group}")


def publish_sign_in_notice(group: str, message: dict[str, Any]) -> None:
    """Tell the sockets of a sign-in that it ended or changed. Sent even while live updates are paused
    after a Redis failure: the pause spares a worker one timeout per streamed word, and a sign-out is
    one request, whose sockets would otherwise go on receiving the conversation until their next
    recheck (``support.websocket.SIGN_IN_RECHECK_SECONDS``)."""
    _send([], group, message, f"a sign-in notice to {group}", even_when_paused=True)


def publish_event(ticket_id: int) -> None:
    """The ticket's timeline moved (a doorbell: the watchers read what is new from the ledger)."""
    publish(group_name(ticket_id), {"type": "ticket.event"})


# Now on Redis's clock, in epoch milliseconds: the one clock every host that writes the stream marks
# shares (a worker's answer's start and a web host's take-over are compared on it, whatever the
# hosts' own clocks say). Redis replicates a script's effects, so its clock may be read before writes.
_REDIS_NOW_MS = "local t = redis.call('TIME')\nlocal now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)\n"

# One piece of a streamed answer, buffered and published in one script, unless a person has the
# ticket (its ``closed`` key), or took it after the answer was begun (its ``taken_at`` key, kept
# after a hand-back): then nothing of it is kept or shown. KEYS: the ticket's stream marker, the
# step's text, the closed key, the taken_at key. ARGV: the text, first piece (1/0), the keys'
# lifetime, the step, the Pub/Sub channel and the message ("" when the layer sends it itself), how
# long ago the answer was begun (milliseconds, on the worker's monotonic clock: its start on Redis's
# clock is that long before now there).
_TOKEN = (
    "if redis.call('EXISTS', KEYS[3]) == 1 then return 0 end\n"
    + _REDIS_NOW_MS
    + """local taken = redis.call('GET', KEYS[4])
if taken and now - tonumber(ARGV[7]) < tonumber(taken) then return 0 end
redis.call('APPEND', KEYS[2], ARGV[1])
redis.call('EXPIRE', KEYS[2], ARGV[3])
if ARGV[2] == '1' then
  redis.call('HSET', KEYS[1], 'step', ARGV[4])
  redis.call('EXPIRE', KEYS[1], ARGV[3])
end
if ARGV[5] ~= '' then redis.call('PUBLISH', ARGV[5], ARGV[6]) end
return 1
"""
)

# A person took the ticket: marked closed and taken now, on Redis's clock. KEYS: the closed key, the
# taken_at key. ARGV: their lifetime.
_TAKEN = (
    _REDIS_NOW_MS
    + """redis.call('SET', KEYS[1], 1, 'EX', ARGV[1])
redis.call('SET', KEYS[2], now, 'EX', ARGV[1])
return 1
"""
)


def stream_token(ticket_id: int, step_id: int, offset: int, text: str, *, begun: float | None = None) -> None:
    """Buffer one streamed piece of the answer and publish it; ``offset`` is its start in the
    step's text, ``begun`` when the answer was begun (a ``time.monotonic()`` of this process; None:
    now). Dropped while a person has the ticket (``stream_close``), and for an answer begun before a
    person last took it: the customer sees no words of an answer the agent will not post."""
    key = _stream_key(ticket_id)
    group = group_name(ticket_id)
    message = {"type": "ticket.token", "step": step_id, "offset": offset, "text": text}
    ago_ms = 0 if begun is None else max(0, int((time.monotonic() - begun) * 1000))
    try:
        # Encoded in here: a piece that cannot be (half an emoji) is not sent, and fails no step.
        publish = _publish_command(group, message)
        channel, payload = (publish[1], publish[2]) if publish is not None else ("", b"")
        script: Command = (
            "EVAL", _TOKEN, 4, key, f"{key}:{step_id}", f"{key}:closed", f"{key}:taken_at",
            text, "0" if offset else "1", STREAM_TTL_SECONDS, step_id, channel, payload, ago_ms,
        )  # fmt: skip
        _write([script])
        if publish is None and not stream_is_closed(ticket_id):  # another layer: its own group_send
            layer = get_channel_layer()
            if layer is not None:
                async_to_sync(layer.group_send)(group, message)
    except Exception:  # noqa: BLE001 - live updates are best effort; the ledger has the truth
        logger.warning("could not send a piece of the answer for ticket %s", ticket_id, exc_info=True)


def stream_close(ticket_id: int) -> None:
    """A person has the ticket: no piece of the agent's answer is kept or published until
    ``stream_open`` (a hand-back), nor after it of an answer begun before now; what was buffered
    goes (a page opened now shows none). The marks last as long as a stream's buffer would:
    longer than any answer in flight."""
    key = _stream_key(ticket_id)
    try:
        step = _client().hget(key, "step")
        keys = [key] + ([f"{key}:{int(step)}"] if step is not None else [])
        _write([
            ("EVAL", _TAKEN, 2, f"{key}:closed", f"{key}:taken_at", STREAM_TTL_SECONDS),
            ("DEL", *keys),
        ])  # fmt: skip
    except Exception:  # noqa: BLE001 - the buffer expires anyway; the page drops a stream at the status change
        logger.warning("could not close the answer stream of ticket %s", ticket_id, exc_info=True)


def stream_open(ticket_id: int) -> None:
    """The agent has the ticket again: its answers stream."""
    try:
        _write([("DEL", f"{_stream_key(ticket_id)}:closed")])
    except Exception:  # noqa: BLE001
        logger.warning("could not open the answer stream of ticket %s", ticket_id, exc_info=True)


def stream_is_closed(ticket_id: int) -> bool:
    try:
        return bool(_client().exists(f"{_stream_key(ticket_id)}:closed"))
    except redis.RedisError:
        return False


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


# The step's text goes, and the marker too if it still names this step.
_FINISH = """
redis.call('DEL', KEYS[2])
if redis.call('HGET', KEYS[1], 'step') == ARGV[1] then redis.call('DEL', KEYS[1]) end
"""


def stream_finished(ticket_id: int, step_id: int) -> None:
    key = _stream_key(ticket_id)
    try:
        _write([("EVAL", _FINISH, 2, key, f"{key}:{step_id}", str(step_id))])
    except Exception:  # noqa: BLE001 - the buffer expires anyway
        logger.warning("could not clear the streamed text of ticket %s", ticket_id, exc_info=True)


def stream_dropped(ticket_id: int, step_id: int) -> None:
    """The answer streamed under ``step_id`` will not be posted (its step failed): its text goes
    from the buffer, and the watchers are told to take its words off the page (a ``ticket.token``
    with ``dropped``, which pages that do not stream ignore). Best effort: a page that misses it
    keeps the words until the next attempt's replace them or the run's end drops them."""
    key = _stream_key(ticket_id)
    message = {"type": "ticket.token", "step": step_id, "offset": 0, "text": "", "dropped": True}
    finish: Command = ("EVAL", _FINISH, 2, key, f"{key}:{step_id}", str(step_id))
    _send([finish], group_name(ticket_id), message, f"the end of a dropped answer of ticket {ticket_id}")
