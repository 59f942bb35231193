"""The web server: daphne, with a bound on what it reads of a request body and of a WebSocket
message before any of it is kept.

daphne reads a whole request body before the application starts (to a temporary file), then puts
all of it in the application's queue at once, in memory: one huge POST could take the process's
memory whatever Django's own limits say, since those apply only once the body has been read. Here a
body past ``WEB_MAX_REQUEST_BYTES`` is not kept at all: its bytes are dropped as they arrive and the
client is answered 413, at once when it waits for "100 Continue" before sending the body (and the
connection is then closed), otherwise once it has sent it. A WebSocket message or frame past
``WEBSOCKET_MAX_MESSAGE_BYTES`` closes the socket with 1009 ("message too big").

Run as daphne is, with the same arguments: ``python -m support.server -b 0.0.0.0 -p 8000
support.asgi:application``.
"""

from __future__ import annotations

import json
from typing import Any

from daphne.cli import CommandLineInterface
from daphne.http_protocol import HTTPFactory, WebRequest
from daphne.server import Server
from django.conf import settings

STATUS_TOO_LARGE = 413


class _Dropped:
    """Where the bytes of a body past the limit go: nowhere."""

    closed = False

    def write(self, data: bytes) -> None:
        pass

    def seek(self, *args: Any) -> int:
        return 0

    def tell(self) -> int:
        return 0

    def read(self, *args: Any) -> bytes:
        return b""

    def close(self) -> None:
        self.closed = True


class BoundedRequest(WebRequest):
    """A daphne request that keeps at most ``WEB_MAX_REQUEST_BYTES`` of its body."""

    too_large = False
    received = 0

    @staticmethod
    def limit() -> int:
        return int(settings.WEB_MAX_REQUEST_BYTES)

    def gotLength(self, length: int | None) -> None:
        if length is None or length <= self.limit():
            super().gotLength(length)
            return
        self._refuse_body()
        expect = self.requestHeaders.getRawHeaders(b"expect") or []
        if any(value.strip().lower() == b"100-continue" for value in expect):
            # The client has sent none of the body and waits to be told: told now, not invited.
            self.requestHeaders.removeHeader(b"expect")
            status, headers, body = self._too_large_answer()
            lines = [b"HTTP/1.1 %d Content Too Large" % status]
            lines += [name + b": " + value for name, value in headers]
            lines += [b"Content-Length: %d" % len(body), b"Connection: close"]
            self.channel.transport.write(b"\r\n".join(lines) + b"\r\n\r\n" + body)
            self.channel.transport.loseConnection()

    def handleContentChunk(self, data: bytes) -> None:
        self.received += len(data)
        if not self.too_large and self.received > self.limit():
            self._refuse_body()  # a body of no stated length (chunked) that went past the limit
        if not self.too_large:
            super().handleContentChunk(data)

    def _refuse_body(self) -> None:
        kept = getattr(self, "content", None)
        if kept is not None and not isinstance(kept, _Dropped):
            kept.close()
        self.too_large = True
        self.content = _Dropped()

    def process(self) -> Any:
        if not self.too_large:
            return super().process()
        status, headers, body = self._too_large_answer()
        self.setHeader(b"connection", b"close")  # nothing more on this connection
        headers = [*headers, (b"Content-Length", str(len(body)).encode())]
        self.handle_reply({"type": "http.response.start", "status": status, "headers": headers})
        self.handle_reply({"type": "http.response.body", "body": body})
        return None

    def _too_large_answer(self) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
        message = (
            f"The request is larger than {self.limit()} bytes; nothing was saved. "
            "Send less at once (fewer or smaller files)."
        )
        headers = self.requestHeaders
        wanted = b" ".join((headers.getRawHeaders(b"accept") or []) + (headers.getRawHeaders(b"content-type") or []))
        if b"json" in wanted:
            return STATUS_TOO_LARGE, [(b"Content-Type", b"application/json")], json.dumps({"error": message}).encode()
        return STATUS_TOO_LARGE, [(b"Content-Type", b"text/plain; charset=utf-8")], message.encode()


class BoundedHTTPFactory(HTTPFactory):
    def buildProtocol(self, addr: Any) -> Any:
        protocol = super().buildProtocol(addr)
        if getattr(protocol, "requestFactory", None) is WebRequest:
            protocol.requestFactory = BoundedRequest
        return protocol


class BoundedServer(Server):
    """daphne's server with the product's bounds (from the settings, not the command line)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs["websocket_max_message_size"] = int(settings.WEBSOCKET_MAX_MESSAGE_BYTES)
        kwargs["websocket_max_frame_size"] = int(settings.WEBSOCKET_MAX_MESSAGE_BYTES)
        super().__init__(*args, **kwargs)

    # daphne's run() makes its own HTTPFactory, whose requests keep any body whole; the one it
    # listens with is ours.
    @property
    def http_factory(self) -> HTTPFactory:
        return self._http_factory

    @http_factory.setter
    def http_factory(self, factory: HTTPFactory) -> None:
        self._http_factory = factory if isinstance(factory, BoundedHTTPFactory) else BoundedHTTPFactory(self)

    # A socket that breaks a rule (a message too big) is told why with a close frame (1009) before
    # its connection ends, rather than cut off with no code the page could read.
    @property
    def ws_factory(self) -> Any:
        return self._ws_factory

    @ws_factory.setter
    def ws_factory(self, factory: Any) -> None:
        factory.setProtocolOptions(failByDrop=False)
        self._ws_factory = factory


class BoundedCommandLine(CommandLineInterface):
    server_class = BoundedServer


if __name__ == "__main__":
    BoundedCommandLine.entrypoint()
