"""The web server bounds what it reads of one request and of one WebSocket message before anything
of it is kept: a body past WEB_MAX_REQUEST_BYTES is answered 413 (at once when the client waits for
a "100 Continue", or after it is sent, without keeping it), and a socket message past
WEBSOCKET_MAX_MESSAGE_BYTES closes the socket with 1009 ("message too big"). daphne read a whole
body into the application's queue, however large, before the product saw a byte of it."""

from __future__ import annotations

import asyncio
import json
import socket

import pytest
import websockets
from django.conf import settings
from django.test import Client

from tests.conftest import make_customer
from tests.workers import free_port, wait_for_http
from tickets import services

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.workers, pytest.mark.timeout(180)]

LIMIT = 200_000
SOCKET_LIMIT = 40_000


@pytest.fixture
def web(cluster):  # noqa: ANN001
    port = free_port()
    proc = cluster.web(
        port,
        WEB_MAX_REQUEST_BYTES=str(LIMIT),
        WEBSOCKET_MAX_MESSAGE_BYTES=str(SOCKET_LIMIT),
        SECRET_KEY=settings.SECRET_KEY,  # the sessions signed in by the test hold there too
    )
    wait_for_http(f"http://127.0.0.1:{port}/healthz", timeout=60, proc=proc)
    return port


def _status_line(sock: socket.socket) -> tuple[str, bytes]:
    """The first response's status line and the rest read with it (a 100 Continue counts)."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            break
        data += chunk
    head, _, rest = data.partition(b"\r\n\r\n")
    return head.split(b"\r\n", 1)[0].decode("latin-1"), head + b"\r\n\r\n" + rest


def _post(port: int, headers: list[str], body_chunks: list[bytes]) -> tuple[str, bytes]:
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        head = ["POST /tickets/new/ HTTP/1.1", f"Host: 127.0.0.1:{port}", *headers]
        sock.sendall(("\r\n".join(head) + "\r\n\r\n").encode())
        try:
            for chunk in body_chunks:
                sock.sendall(chunk)
        except (BrokenPipeError, ConnectionResetError):
            pass  # answered before the whole body was sent: the answer is read below
        return _status_line(sock)


def test_a_body_past_the_limit_is_a_413_that_says_so(web):
    size = LIMIT * 5
    chunks = [b"x" * 65536] * (size // 65536) + [b"x" * (size % 65536)]
    status, response = _post(web, [f"Content-Length: {size}", "Accept: application/json"], chunks)

    assert status.startswith("HTTP/1.1 413"), response[:500]
    assert f"{LIMIT} bytes".encode() in response, response[:500]


def test_a_chunked_body_past_the_limit_is_a_413(web):
    piece = b"x" * 50_000
    chunks = [b"%x\r\n%s\r\n" % (len(piece), piece)] * 10 + [b"0\r\n\r\n"]
    status, response = _post(web, ["Transfer-Encoding: chunked"], chunks)

    assert status.startswith("HTTP/1.1 413"), response[:500]


def test_a_client_waiting_to_send_a_body_past_the_limit_is_told_413_without_sending_it(web):
    # A client asking "100 Continue?" for a terabyte is answered before it sends a byte of it.
    status, response = _post(web, [f"Content-Length: {10**12}", "Expect: 100-continue"], [])

    assert status.startswith("HTTP/1.1 413"), response[:500]


def test_a_body_within_the_limit_still_reaches_the_product(web):
    body = b"subject=Kettle&body=" + b"x" * (LIMIT // 2)
    status, response = _post(
        web, [f"Content-Length: {len(body)}", "Content-Type: application/x-www-form-urlencoded"], [body]
    )

    # Not signed in and no CSRF token: the product's own answer, not the server's.
    assert not status.startswith("HTTP/1.1 413"), response[:500]
    assert status.split(" ")[1] in {"302", "403"}, response[:500]


def test_a_socket_message_past_the_limit_closes_the_socket_with_1009(web):
    customer = make_customer()
    ticket, _ = services.ticket_open(customer=customer, subject="Kettle", body="Where is my kettle?")
    client = Client()
    client.force_login(customer.user)
    cookie = f"sessionid={client.cookies['sessionid'].value}"
    url = f"ws://127.0.0.1:{web}/ws/tickets/{ticket.pk}/"
    headers = {"Cookie": cookie}

    async def scenario() -> tuple[list[dict], int | None]:
        async with websockets.connect(
            url, origin=f"http://127.0.0.1:{web}", additional_headers=headers, max_size=None
        ) as ws:
            # Past the chat's own frame limit but within the server's: an error frame, still open.
            await ws.send(json.dumps({"type": "message", "text": "y" * 20_000}))
            frames = []
            while not any(f.get("type") == "error" for f in frames):
                frames.append(json.loads(await asyncio.wait_for(ws.recv(), timeout=20)))
            await ws.send(json.dumps({"type": "ping"}))
            while frames[-1].get("type") != "pong":
                frames.append(json.loads(await asyncio.wait_for(ws.recv(), timeout=20)))
            # Past the server's: closed, never read into the product.
            await ws.send("z" * (SOCKET_LIMIT * 3))
            try:
                while True:
                    await asyncio.wait_for(ws.recv(), timeout=20)
            except websockets.ConnectionClosed as closed:
                return frames, closed.rcvd.code if closed.rcvd else None
            except TimeoutError:
                return frames, None  # still open: the message was read

    frames, code = asyncio.run(scenario())

    assert frames[-1] == {"type": "pong"}
    assert code == 1009
