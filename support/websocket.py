"""WebSocket hardening shared by every socket: exact origins, frames that cannot crash a consumer,
and an answer for paths that lead nowhere."""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import urlsplit

from channels.generic.websocket import AsyncJsonWebsocketConsumer, AsyncWebsocketConsumer
from django.conf import settings
from django.http.request import validate_host

# Close codes the browser sees.
CLOSE_FORBIDDEN_ORIGIN = 4403
CLOSE_NOT_FOUND = 4404
# A frame from a browser is a few hundred bytes; anything far bigger is not ours.
MAX_FRAME_CHARS = 16_000
MAX_JSON_DEPTH = 20


def _origin(value: str) -> tuple[str, str, int] | None:
    """(scheme, host, port) of an origin or URL, with the scheme's default port; None if unusable."""
    try:
        parts = urlsplit(value.strip())
        port = parts.port
    except ValueError:
        return None
    scheme = (parts.scheme or "").lower()
    if scheme not in {"http", "https"} or not parts.hostname:
        return None
    return scheme, parts.hostname.lower(), port or (443 if scheme == "https" else 80)


def origin_allowed(origin: str, *, scheme: str, host_header: str) -> bool:
    """Is this Origin the page's own site, or one of CSRF_TRUSTED_ORIGINS? Scheme, host and port all count.

    The page's own site is the socket's: the scheme the socket came in on (ws is http, wss is
    https) and the Host it was asked for, whose host name ALLOWED_HOSTS must allow.
    """
    wanted = _origin(origin)
    if wanted is None:
        return False
    for trusted in getattr(settings, "CSRF_TRUSTED_ORIGINS", []):
        if "*" not in trusted and _origin(trusted) == wanted:
            return True
    own = _origin(f"{'https' if scheme in {'wss', 'https'} else 'http'}://{host_header}")
    return own is not None and own == wanted and validate_host(own[1], settings.ALLOWED_HOSTS)


class StrictOriginValidator:
    """ASGI middleware: a WebSocket opens only from an allowed origin; anything else is closed (4403)."""

    def __init__(self, application: Any) -> None:
        self.application = application

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> Any:
        if scope["type"] == "websocket":
            headers = {name.decode("latin1").lower(): value.decode("latin1") for name, value in scope["headers"]}
            origin, host = headers.get("origin", ""), headers.get("host", "")
            if not origin or not origin_allowed(origin, scheme=scope.get("scheme", "ws"), host_header=host):
                return await _refuse(receive, send, CLOSE_FORBIDDEN_ORIGIN)
        return await self.application(scope, receive, send)


async def _refuse(receive: Any, send: Any, code: int) -> None:
    message = await receive()
    if message["type"] == "websocket.connect":
        await send({"type": "websocket.close", "code": code})


class SafeJsonConsumer(AsyncJsonWebsocketConsumer):
    """A JSON consumer whose connection survives any frame: binary, not JSON, too big or too deep
    get an error frame back, and the socket stays open."""

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
        await self.receive_json(content, **kwargs)


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
