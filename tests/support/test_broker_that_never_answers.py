"""A Redis broker that accepts the connection and never answers costs a doorbell, not the process.

Kombu opens its Redis connections with no socket timeout: a doorbell sent to a broker that hung
(stopped, or a network that swallows the session) waited forever, in the web request that posted a
customer's message, in the worker that scheduled a retry, in the sweeper. The broker's connections
now time out (10 s to answer, 5 s to connect); the doorbell is lost, logged, and rung again by the
sweeper once the broker is back (DESIGN.md, invariant 2).

RabbitMQ the same: its connections (py-amqp's) had no read or write timeout, and with publisher
confirms a doorbell to a broker that stopped answering after the handshake waited for its confirm
forever. Reads and writes now time out after 10 s.
"""

from __future__ import annotations

import contextlib
import os
import socket
import struct
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import silent_server

ROOT = Path(__file__).resolve().parents[2]

RING = """
import time, django
django.setup()
from agents.tasks import ring
began = time.monotonic()
ring(1)
print(f"rang after {time.monotonic() - began:.1f} s")
"""


@pytest.fixture
def silent_port() -> Iterator[int]:
    with silent_server() as (port, _):
        yield port


def test_a_doorbell_to_a_broker_that_never_answers_gives_up_instead_of_waiting_forever(silent_port):
    env = {
        **os.environ,
        "DEBUG": "1",
        "DJANGO_SETTINGS_MODULE": "support.settings",
        "CELERY_BROKER_URL": f"redis://127.0.0.1:{silent_port}/0",
    }
    try:
        done = subprocess.run(
            [sys.executable, "-c", RING], cwd=ROOT, env=env, capture_output=True, text=True, timeout=45
        )
    except subprocess.TimeoutExpired:
        pytest.fail("a doorbell to a broker that never answers was still waiting after 45 s")
    assert done.returncode == 0, done.stderr[-2000:]
    assert "rang after" in done.stdout
    assert "the doorbell could not be sent to the broker" in done.stderr


# --- RabbitMQ -------------------------------------------------------------------------------------

RABBITMQ = ("127.0.0.1", 5672)
AMQP_FRAME_END = 0xCE
BASIC_PUBLISH = (60, 40)  # class and method ids of basic.publish (AMQP 0-9-1)


def _rabbitmq_is_up() -> bool:
    try:
        socket.create_connection(RABBITMQ, timeout=2).close()
    except OSError:
        return False
    return True


@contextlib.contextmanager
def rabbitmq_that_falls_silent() -> Iterator[int]:
    """RabbitMQ (guest/guest on 127.0.0.1:5672) behind a loopback port that falls silent once the
    first message is published: the handshake, the channel and the queue's declaration are
    answered; the publish and everything after it, on every connection, never are (a broker that
    hung, a network that swallows the session). Yields the port."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    silent = threading.Event()
    held: list[socket.socket] = []

    def pump(source: socket.socket, sink: socket.socket, watch: bool) -> None:
        # From the client, frames are read whole to see the publish; the 8-byte protocol header first.
        pending = b""
        header_left = 8 if watch else 0
        while True:
            try:
                data = source.recv(65536)
            except OSError:
                return
            if not data or silent.is_set():
                return
            if watch:
                pending += data
                if header_left:
                    taken = min(header_left, len(pending))
                    header_left -= taken
                    pending = pending[taken:]
                while len(pending) >= 7:
                    kind, _, size = struct.unpack(">BHI", pending[:7])
                    if len(pending) < 7 + size + 1:
                        break
                    payload, pending = pending[7 : 7 + size], pending[7 + size + 1 :]
                    if kind == 1 and struct.unpack(">HH", payload[:4]) == BASIC_PUBLISH:
                        silent.set()  # the publish reaches nobody, and nothing comes back from now on
                        return
            try:
                sink.sendall(data)
            except OSError:
                return

    def accept() -> None:
        while True:
            try:
                client = listener.accept()[0]
            except OSError:
                return
            held.append(client)
            if silent.is_set():
                continue  # accepted, never answered
            upstream = socket.create_connection(RABBITMQ)
            held.append(upstream)
            threading.Thread(target=pump, args=(client, upstream, True), daemon=True).start()
            threading.Thread(target=pump, args=(upstream, client, False), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    try:
        yield listener.getsockname()[1]
    finally:
        listener.close()
        for conn in held:
            conn.close()


@pytest.mark.skipif(not _rabbitmq_is_up(), reason="RabbitMQ is not running on 127.0.0.1:5672")
def test_a_doorbell_to_a_rabbitmq_that_stops_answering_gives_up_instead_of_waiting_for_its_confirm():
    # Publisher confirms (settings): the publish waits for the broker's ack, which never comes.
    with rabbitmq_that_falls_silent() as port:
        env = {
            **os.environ,
            "DEBUG": "1",
            "DJANGO_SETTINGS_MODULE": "support.settings",
            "CELERY_BROKER_URL": f"amqp://guest:guest@127.0.0.1:{port}//",
        }
        try:
            done = subprocess.run(
                [sys.executable, "-c", RING], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60
            )
        except subprocess.TimeoutExpired:
            pytest.fail("a doorbell to a RabbitMQ that stopped answering was still waiting after 60 s")
    assert done.returncode == 0, done.stderr[-2000:]
    assert "rang after" in done.stdout
    assert "the doorbell could not be sent to the broker" in done.stderr
