"""WebSocket hardening shared by every socket: exact origins, frames that cannot crash a consumer,
and an answer for paths that lead nowhere."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import urlsplit

from channels.db import database_sync_to_async
from channels.exceptions import StopConsumer
from channels.generic.websocket import AsyncJsonWebsocketConsumer, AsyncWebsocketConsumer
from channels.layers import get_channel_layer
from channels.utils import await_many_dispatch
from django.conf import settings
from django.contrib.auth import HASH_SESSION_KEY, SESSION_KEY, get_user_model
from django.http.request import validate_host
from django.utils.crypto import constant_time_compare

# Close codes the browser sees.
CLOSE_FORBIDDEN_ORIGIN = 4403
CLOSE_NOT_FOUND = 4404
# Live updates can be had again (Redis answers this web server again): every page reconnects on it,
# its new socket catching up from the ledger and joining its groups (as 1012 "service restart", which
# a server may not send through daphne).
CLOSE_LIVE_UPDATES_BACK = 4012
# A frame from a browser is a few hundred bytes; anything far bigger is not ours.
MAX_FRAME_CHARS = 16_000
MAX_JSON_DEPTH = 20
# A sign-in that ended is told to its sockets at once; this bounds how long one whose notice was lost
# (Redis down for a moment) stays open: its next read or send after this long checks the session again.
SIGN_IN_RECHECK_SECONDS = 30
# A session's end is known (as stored); the socket waits for it in sleeps of at most this long (a
# session may last weeks).
SESSION_END_WAIT_MAX_SECONDS = 3600.0
# A socket that has told its page nothing for this long looks at the ledger itself: its rings come
# through Redis, and a writer cut off from it (or whose PUBLISH was lost) writes with no word to the
# web server holding the socket.
QUIET_CHECK_SECONDS = 10.0
# How long a socket waits for its channel in the Channels layer (Redis) before it goes on without live
# updates: a Redis cut off from this web server silently would otherwise hold it for the kernel's
# connect timeout (minutes).
LAYER_WAIT_SECONDS = 5.0
# How often a socket opened without live updates asks whether Redis answers again.
LAYER_RETRY_SECONDS = 10.0

logger = logging.getLogger(__name__)


class NoLiveUpdates:
    """The Channels layer of a socket opened while Redis could not be reached from this web server:
    it joins no group and hears nothing; what it shows comes from the ledger, read after each quiet
    spell (``check_when_quiet``), until Redis answers again (``until_live_updates_answer``) and the
    socket closes for the page to open a new one."""

    async def new_channel(self, prefix: str = "") -> str:
        return ""

    async def receive(self, channel: str) -> dict[str, Any]:
        await asyncio.Event().wait()  # never: the socket's end cancels it
        raise AssertionError("unreachable")

    async def group_add(self, group: str, channel: str) -> None:
        pass

    async def group_discard(self, group: str, channel: str) -> None:
        pass


async def check_when_quiet(last_heard: Callable[[], float], check: Callable[[], Awaitable[None]]) -> None:
    """Run ``check`` after every ``QUIET_CHECK_SECONDS`` in which the socket heard nothing (``last_heard``:
    when it last did, on the monotonic clock) and was not checked; until the socket's task is cancelled.
    A check that fails (the database away for a moment) is made again after the next quiet spell."""
    checked_at = time.monotonic()
    while True:
        quiet_for = time.monotonic() - max(last_heard(), checked_at)
        if quiet_for < QUIET_CHECK_SECONDS:
            await asyncio.sleep(QUIET_CHECK_SECONDS - quiet_for)
            continue
        checked_at = time.monotonic()
        try:
            await check()
        except Exception:  # noqa: BLE001 - a look the next quiet spell makes again; the socket stays
            logger.warning("a socket's look at the ledger after a quiet spell failed", exc_info=True)


async def until_live_updates_answer(alias: str) -> None:
    """Return once the Channels layer ``alias`` answers again: asked every ``LAYER_RETRY_SECONDS``
    with a PUBLISH to a channel nobody reads, which leaves nothing behind whether it fails or not."""
    while True:
        await asyncio.sleep(LAYER_RETRY_SECONDS)
        try:
            layer = get_channel_layer(alias)
            await asyncio.wait_for(
                layer.send(f"{getattr(layer, 'prefix', '')}live-updates-back", {"type": "noop"}), LAYER_WAIT_SECONDS
            )
        except Exception:  # noqa: BLE001 - redis-py's errors and the wait's timeout alike: still away
            continue
        return


def _origin(value: str, *, as_sent: bool = False) -> tuple[str, str, int] | None:
    """(scheme, host, port) of an origin or URL, with the scheme's default port; None if unusable.

    ``as_sent``: an Origin header, which a browser sends as scheme, host and an optional port, and
    nothing else (RFC 6454): one with a path, a query, a fragment, a user or spaces is no page's."""
    try:
        parts = urlsplit(value if as_sent else value.strip())
        port = parts.port
    except ValueError:
        return None
    scheme = (parts.scheme or "").lower()
    if scheme not in {"http", "https"} or not parts.hostname:
        return None
    if as_sent and (
        value != value.strip() or parts.path or parts.query or parts.fragment or "#" in value or "?" in value
    ):
        return None
    if as_sent and (parts.username is not None or parts.password is not None):
        return None
    return scheme, parts.hostname.lower(), port or (443 if scheme == "https" else 80)


def origin_allowed(origin: str, *, scheme: str, host_header: str) -> bool:
    """Is this Origin the page's own site, or one of CSRF_TRUSTED_ORIGINS? Scheme, host and port all count.

    The page's own site is the socket's: the scheme the socket came in on (ws is http, wss is
    https) and the Host it was asked for, whose host name ALLOWED_HOSTS must allow.
    """
    wanted = _origin(origin, as_sent=True)
    own = _origin(f"{'https' if scheme in {'wss', 'https'} else 'http'}://{host_header}")
    if wanted is None or own is None:
        return False
    # The Host the socket was asked for is one of this site's whatever the origin (Django's pages
    # answer any other 400). ALLOWED_HOSTS writes an IPv6 address in brackets ("[::1]"), as the Host
    # header does; the parsed host name has none.
    host = f"[{own[1]}]" if ":" in own[1] else own[1]
    if not validate_host(host, settings.ALLOWED_HOSTS):
        return False
    for trusted in getattr(settings, "CSRF_TRUSTED_ORIGINS", []):
        if "*" not in trusted and _origin(trusted) == wanted:
            return True
    return own == wanted


class StrictOriginValidator:
    """ASGI middleware: a WebSocket opens only from an allowed origin; anything else is closed (4403)."""

    def __init__(self, application: Any) -> None:
        self.application = application

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> Any:
        if scope["type"] == "websocket":
            headers = {name.decode("latin1").lower(): value.decode("latin1") for name, value in scope["headers"]}
            origin, host = headers.get("origin", ""), headers.get("host", "")
            if not origin or not origin_allowed(origin, scheme=_scheme(scope, headers), host_header=host):
                return await _refuse(receive, send, CLOSE_FORBIDDEN_ORIGIN)
        return await self.application(scope, receive, send)


def _scheme(scope: dict[str, Any], headers: dict[str, str]) -> str:
    """The scheme the browser used, as Django's ``request.is_secure()`` reads it: behind a
    TLS-terminating proxy, from SECURE_PROXY_SSL_HEADER (daphne leaves the scope's ``ws``), so the
    page's own https origin is its socket's too."""
    proxy_header = getattr(settings, "SECURE_PROXY_SSL_HEADER", None)
    if proxy_header:
        name, secure_value = proxy_header
        value = headers.get(name.removeprefix("HTTP_").replace("_", "-").lower())
        if value is not None:
            return "wss" if value.split(",", 1)[0].strip() == secure_value else "ws"
    return scope.get("scheme", "ws")


async def _refuse(receive: Any, send: Any, code: int) -> None:
    message = await receive()
    if message["type"] == "websocket.connect":
        await send({"type": "websocket.close", "code": code})


class SafeJsonConsumer(AsyncJsonWebsocketConsumer):
    """A JSON consumer whose connection survives any frame: binary, not JSON, too big or too deep,
    not an object of one of the ``frame_types`` it reads, get an error frame back, and the socket
    stays open. Only a frame of those types reaches ``receive_json``.

    Every socket answers ``{"type": "ping"}`` with ``{"type": "pong"}``: a page whose socket has been
    quiet for a while asks whether it still carries anything (a half-open connection, after a laptop
    or a phone changed networks, never closes on its own; static/js/heartbeat.js)."""

    # The ``type`` of each frame this socket reads from the browser, beside ``ping``; none: it only sends.
    frame_types: tuple[str, ...] = ()

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        """As Channels' own, except when the Channels layer cannot be reached (Redis away, or cut off
        from this web server while PostgreSQL is not): the socket opens without live updates
        (``NoLiveUpdates``) and reads the ledger when quiet, instead of closing before it opened, again
        on every reconnect, with the customer's answers stored and never shown. Once the layer answers
        again, such a socket closes (``CLOSE_LIVE_UPDATES_BACK``): the page's new socket has them."""
        self.scope, self.base_send = scope, send
        self.channel_layer = get_channel_layer(self.channel_layer_alias)
        live_again: asyncio.Task[None] | None = None
        try:
            self.channel_name = await asyncio.wait_for(self.channel_layer.new_channel(), LAYER_WAIT_SECONDS)
        except Exception:  # noqa: BLE001 - redis-py's errors and the wait's timeout alike
            logger.warning("the Channels layer cannot be reached: a socket opens without live updates", exc_info=True)
            self.channel_layer = NoLiveUpdates()
            self.channel_name = await self.channel_layer.new_channel()
            live_again = asyncio.create_task(self._close_when_live_updates_answer())
        try:
            await await_many_dispatch([receive, lambda: self.channel_layer.receive(self.channel_name)], self.dispatch)
        except StopConsumer:
            pass
        finally:
            if live_again is not None:
                live_again.cancel()

    async def _close_when_live_updates_answer(self) -> None:
        """A socket without live updates stays so only while Redis is away: then it closes, and the
        page reconnects from the last event it has (what was posted meanwhile comes with the catch-up)."""
        await until_live_updates_answer(self.channel_layer_alias)
        logger.info("the Channels layer answers again: a socket without live updates closes for its page to reconnect")
        await self.close(code=CLOSE_LIVE_UPDATES_BACK)

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None, **kwargs: Any) -> None:
        if text_data is None:
            await self.send_json({"type": "error", "error": "Send JSON text frames, not binary ones."})
            return
        if len(text_data) > MAX_FRAME_CHARS:
            await self.send_json({"type": "error", "error": f"A frame can be at most {MAX_FRAME_CHARS} characters."})
            return
        try:
            content = json.loads(text_data)
        except (ValueError, RecursionError):
            await self.send_json({"type": "error", "error": "A frame must be valid JSON."})
            return
        if _depth(content) > MAX_JSON_DEPTH:
            await self.send_json({"type": "error", "error": "A frame is nested too deeply."})
            return
        kind = content.get("type") if isinstance(content, dict) else None
        if kind == "ping":
            await self.send_json({"type": "pong"})
            return
        if not isinstance(kind, str) or kind not in self.frame_types:
            await self.send_json({"type": "error", "error": self._unread(kind)})
            return
        await self.receive_json(content, **kwargs)

    def _unread(self, kind: Any) -> str:
        said = f"of type {kind[:40]!r}" if isinstance(kind, str) else "without a type"
        return f"A frame {said} is not read here; this socket reads {', '.join((*self.frame_types, 'ping'))}."


def session_group(session_key: str) -> str:
    """The group of the sockets opened with this session: told when it is signed out."""
    return f"signin.session.{session_key}"


def account_group(user_id: int) -> str:
    """The group of the sockets opened by this account: told when it changes (a password, deactivated)."""
    return f"signin.user.{user_id}"


class SignedInConsumer(SafeJsonConsumer):
    """A socket that lives only as long as the sign-in it was opened with: signed out (that session
    ends), the password changed or reset (every session made before no longer matches), or the
    account deactivated, or what the page needs taken away (``may_watch``: a permission). Told through
    its groups (``tickets.apps`` publishes), and checked again before a read or a send at most every
    ``SIGN_IN_RECHECK_SECONDS`` in case a notice was lost. A session that expires sends no notice: the
    socket knows when its session ends (as stored) and closes then (4403), and checks before anything
    it would send after that moment. Once it is over, nothing more is sent."""

    closed_code = 4403  # signed out: the page says so and offers to sign in
    # The sign-in it was opened with no longer checks out (a password changed: Django gives the browser
    # that changed it a new session key; a deactivated account; a lost sign-out notice): the page
    # reconnects at once, with whatever cookie it has now, and the new socket's own check decides.
    changed_code = 4401
    sign_in_groups: tuple[str, ...] = ()
    signed_out = False
    checked_at = float("-inf")
    # When the session ends, as stored when last checked (epoch seconds: the stored end is a date);
    # infinity for a session store that does not say.
    session_ends_at = float("inf")
    session_watch: asyncio.Task[None] | None = None

    async def watch_sign_in(self) -> bool:
        """Join the sign-in's groups, then check it still holds (a sign-out in between is seen).
        False: the socket was closed."""
        user = self.scope["user"]
        session = self.scope.get("session")
        groups = [account_group(user.pk)]
        if session is not None and session.session_key:
            groups.append(session_group(session.session_key))
        for group in groups:
            await self.channel_layer.group_add(group, self.channel_name)
        self.sign_in_groups = tuple(groups)
        if not await self.still_signed_in(force=True):
            return False
        self.session_watch = asyncio.create_task(self._end_with_the_session())
        return True

    async def still_signed_in(self, *, force: bool = False) -> bool:
        if self.signed_out:
            return False
        now = time.monotonic()
        if not force and now - self.checked_at < SIGN_IN_RECHECK_SECONDS and time.time() < self.session_ends_at:
            return True
        self.checked_at = now
        if not await database_sync_to_async(self._sign_in_holds)():
            # Past the session's end it expired: signed out, as the page says (4403). Otherwise the
            # sign-in changed (4401): the page reconnects with the cookie it has now.
            await self._end_sign_in(self.closed_code if time.time() >= self.session_ends_at else self.changed_code)
            return False
        return True

    async def _end_with_the_session(self) -> None:
        """Close the socket when its session ends, unless the session was renewed meanwhile (saved
        again with a later end: then wait for that one)."""
        while not self.signed_out:
            left = self.session_ends_at - time.time()
            if left > 0:
                await asyncio.sleep(min(left, SESSION_END_WAIT_MAX_SECONDS))
                continue
            try:
                if not await self.still_signed_in(force=True):
                    return
            except Exception:  # noqa: BLE001 - the database away for a moment: looked at again shortly
                logger.warning("a socket could not check its session at its end", exc_info=True)
                await asyncio.sleep(QUIET_CHECK_SECONDS)

    def _sign_in_holds(self) -> bool:
        user = get_user_model().objects.filter(pk=self.scope["user"].pk).first()
        session = self.scope.get("session")
        if user is None or not user.is_active or not self.may_watch(user):
            return False
        if session is None or not session.session_key:
            return True  # a user not signed in by a session (set in the scope by other means): its account holds
        fresh = session.__class__(session.session_key)  # as stored now, not as read at connect
        stored = fresh.get(HASH_SESSION_KEY)
        # support.sessions.SessionStore says when the session it read ends (None: it found none, and
        # the end known before stays: past it, the session expired; before it, it was ended).
        ends = getattr(fresh, "stored_expiry", None)
        if ends is not None:
            self.session_ends_at = ends.timestamp()
        same_user = str(fresh.get(SESSION_KEY, "")) == str(user.pk)
        return same_user and bool(stored) and constant_time_compare(stored, user.get_session_auth_hash())

    def may_watch(self, user: Any) -> bool:
        """What the socket's own page needs beyond a sign-in (a permission), read again at each check:
        taken away (a group left, a permission removed), the socket ends as a sign-in that changed."""
        return True

    async def _end_sign_in(self, code: int) -> None:
        self.signed_out = True
        await self.close(code=code)

    async def send_json(self, content: Any, close: bool = False) -> None:
        if self.signed_out:
            return  # the sign-in is over: not one more frame
        await super().send_json(content, close=close)

    async def signin_ended(self, message: dict[str, Any]) -> None:
        if not self.signed_out:
            await self._end_sign_in(self.closed_code)

    async def signin_changed(self, message: dict[str, Any]) -> None:
        await self.still_signed_in(force=True)

    async def leave_sign_in_groups(self) -> None:
        if self.session_watch is not None:
            self.session_watch.cancel()
        for group in self.sign_in_groups:
            await self.channel_layer.group_discard(group, self.channel_name)


def _depth(value: Any, level: int = 0) -> int:
    if level > MAX_JSON_DEPTH:
        return level
    if isinstance(value, dict):
        return max((_depth(v, level + 1) for v in value.values()), default=level + 1)
    if isinstance(value, list):
        return max((_depth(v, level + 1) for v in value), default=level + 1)
    return level


class NotFoundConsumer(AsyncWebsocketConsumer):
    """Every path no consumer serves: accepted, then closed with 4404, never a crashed handshake."""

    async def connect(self) -> None:
        await self.accept()
        await self.close(code=CLOSE_NOT_FOUND)
