"""A request to the payment provider ends within PAYMENTS_TIMEOUT_SECONDS, whole.

requests' timeout bounds each read of the socket: a provider (or a proxy in front of it) that sent
its answer a few bytes at a time, each within the timeout, held the worker, and the ticket whose
refund it was paying or looking up, until the task's time limit, or for ever under a pool that
kills nothing. Now the connection is cut at the timeout: the request fails as a dropped
connection would (the outcome unknown, reconciled by the refund's key), and the next one is asked
afresh.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from payments.provider import PaymentProvider, ProviderUnreachable

PAYMENT = {"id": "pi_1", "object": "payment_intent", "amount": 10000, "currency": "usd", "status": "succeeded"}


class _Trickles(BaseHTTPRequestHandler):
    """Answers every request whole, but ``what`` (``body`` or ``headers``) one piece every 0.2 s,
    unless ``fast`` (then at once)."""

    protocol_version = "HTTP/1.1"
    what = "body"
    fast = False

    def log_message(self, format, *args):  # noqa: A002, ANN001, ANN002, ANN201
        pass

    def do_GET(self) -> None:  # noqa: N802
        body = json.dumps(PAYMENT).encode()
        head = [b"HTTP/1.1 200 OK\r\n", b"Content-Type: application/json\r\n"]
        head += [f"X-Pad-{n}: {n}\r\n".encode() for n in range(40)]
        head += [f"Content-Length: {len(body)}\r\n\r\n".encode()]
        pieces = (head + [body]) if self.what == "headers" else ([b"".join(head)] + [bytes([b]) for b in body])
        try:
            for piece in pieces:
                self.wfile.write(piece)
                self.wfile.flush()
                if not self.fast:
                    time.sleep(0.2)
        except OSError:
            pass  # the client hung up


@contextlib.contextmanager
def trickling(what: str) -> Iterator[type[_Trickles]]:
    handler = type("H", (_Trickles,), {"what": what})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    handler.url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        yield handler
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize("what", ["body", "headers"])
def test_a_provider_that_trickles_its_answer_is_cut_off_at_the_timeout(what):
    with trickling(what) as handler:
        provider = PaymentProvider(api_base=handler.url, timeout_seconds=1)
        began = time.monotonic()
        with pytest.raises(ProviderUnreachable):
            provider.get_payment("pi_1")
        took = time.monotonic() - began

        # Trickled in full: 8.6 s (headers) or more; the margin is for a loaded machine.
        assert took < 6, f"a request with a 1 s timeout held its caller {took:.1f} s"
        # The next request is asked afresh, on a connection of its own.
        handler.fast = True
        assert provider.get_payment("pi_1").amount_cents == 10000
