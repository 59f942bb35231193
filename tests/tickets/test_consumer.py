"""The chat's WebSocket, through the real ASGI application (session auth, origin check,
Redis channel layer), with Channels' WebsocketCommunicator."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from channels.db import database_sync_to_async
from channels.layers import get_channel_layer
from channels.testing import WebsocketCommunicator
from django.test import Client

from support.asgi import application
from tests.conftest import make_customer
from tests.workers import purge_stream_buffers
from tickets import realtime, services
from tickets.consumers import TicketConsumer
from tickets.models import ActorKind, AuthorKind, Customer, Ticket, TicketStatus

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _no_stream_left_over() -> None:
    purge_stream_buffers()  # ticket and step ids restart with each test database


@pytest.fixture
def ticket(customer: Customer) -> Ticket:
    ticket, _ = services.ticket_open(customer=customer, subject="Kettle", body="Where is my kettle?")
    services.message_post(ticket=ticket, author_kind=AuthorKind.STAFF, body="Internal: check stock", is_public=False)
    services.message_post(ticket=ticket, author_kind=AuthorKind.AGENT, body="It ships today.")
    return ticket


def session_cookie(customer: Customer | None) -> list[tuple[bytes, bytes]]:
    headers = [(b"origin", b"http://127.0.0.1"), (b"host", b"127.0.0.1")]
    if customer is not None:
        client = Client()
        client.force_login(customer.user)
        headers.append((b"cookie", f"sessionid={client.cookies['sessionid'].value}".encode()))
    return headers


def socket(ticket_id: int, *, after: int | None = None, headers: list[tuple[bytes, bytes]]) -> WebsocketCommunicator:
    path = f"/ws/tickets/{ticket_id}/" + (f"?after={after}" if after is not None else "")
    return WebsocketCommunicator(application, path, headers=headers)


async def until_ready(ws: WebsocketCommunicator) -> list[dict[str, Any]]:
    frames = []
    while True:
        frame = await ws.receive_json_from(timeout=5)
        if frame["type"] == "ready":
            return frames
        frames.append(frame)


def run(scenario: Callable[[], Awaitable[None]]) -> None:
    async_to_sync(scenario)()


def public_seqs(ticket: Ticket) -> list[int]:
    return list(ticket.events.filter(is_public=True).order_by("seq").values_list("seq", flat=True))


# --- the door --------------------------------------------------------------------------------


def test_the_owner_connects_and_gets_the_public_timeline_in_order(customer, ticket):
    headers = session_cookie(customer)

    async def scenario() -> None:
        ws = socket(ticket.pk, after=0, headers=headers)
        connected, _ = await ws.connect()
        assert connected
        frames = await until_ready(ws)
        await ws.disconnect()
        messages = [(f["author"], f["text"]) for f in frames if f["kind"] == "message"]
        assert messages == [("customer", "Where is my kettle?"), ("agent", "It ships today.")]
        seqs = [f["seq"] for f in frames]
        assert seqs == sorted(seqs) and len(seqs) == len(set(seqs))
        assert all(f["type"] == "event" for f in frames)

    run(scenario)


def test_another_customer_is_refused_with_4404_and_gets_no_data(ticket):
    intruder = make_customer()
    headers = session_cookie(intruder)

    async def scenario() -> None:
        ws = socket(ticket.pk, after=0, headers=headers)
        await ws.connect()
        closed = await ws.receive_output(timeout=5)
        assert closed == {"type": "websocket.close", "code": 4404}
        assert await ws.receive_nothing(timeout=0.3)

    run(scenario)


def test_a_missing_ticket_is_refused_like_another_customers(customer):
    headers = session_cookie(customer)

    async def scenario() -> None:
        ws = socket(987654, headers=headers)
        await ws.connect()
        assert await ws.receive_output(timeout=5) == {"type": "websocket.close", "code": 4404}

    run(scenario)


def test_an_anonymous_visitor_is_refused_with_4403(ticket):
    headers = session_cookie(None)

    async def scenario() -> None:
        ws = socket(ticket.pk, after=0, headers=headers)
        await ws.connect()
        assert await ws.receive_output(timeout=5) == {"type": "websocket.close", "code": 4403}
        assert await ws.receive_nothing(timeout=0.3)

    run(scenario)


def test_a_socket_from_another_site_is_refused_before_the_consumer(customer, ticket):
    headers = [(b"origin", b"http://evil.example"), *session_cookie(customer)[1:]]  # host 127.0.0.1, cookie

    async def scenario() -> None:
        ws = socket(ticket.pk, headers=headers)
        connected, _ = await ws.connect()
        assert not connected

    run(scenario)


# --- replay ------------------------------------------------------------------------------------


def test_replay_sends_only_public_events_after_the_given_seq(customer, ticket):
    seqs = public_seqs(ticket)
    agent_reply_seq = ticket.events.get(kind="message", payload__author_kind="agent").seq
    headers = session_cookie(customer)

    async def scenario() -> None:
        ws = socket(ticket.pk, after=agent_reply_seq - 1, headers=headers)
        await ws.connect()
        frames = await until_ready(ws)
        await ws.disconnect()
        assert [(f["seq"], f["kind"], f["text"]) for f in frames] == [(agent_reply_seq, "message", "It ships today.")]

    assert seqs[-1] == agent_reply_seq
    run(scenario)


def test_the_ready_frame_names_the_last_seq_looked_at_so_a_reconnect_resumes_there(customer, ticket):
    headers = session_cookie(customer)
    last = public_seqs(ticket)[-1]

    async def scenario() -> None:
        ws = socket(ticket.pk, after=0, headers=headers)
        await ws.connect()
        await until_ready(ws)
        await ws.disconnect()
        ws = socket(ticket.pk, after=last, headers=headers)
        await ws.connect()
        assert await ws.receive_json_from(timeout=5) == {"type": "ready", "seq": last}
        await ws.disconnect()

    run(scenario)


def test_connecting_in_the_middle_of_an_answer_gets_the_text_so_far_at_offset_0(customer, ticket):
    headers = session_cookie(customer)
    step_id = 880001
    realtime.stream_token(ticket.pk, step_id, 0, "Your kettle ")
    realtime.stream_token(ticket.pk, step_id, 12, "ships ")
    last = public_seqs(ticket)[-1]

    async def scenario() -> None:
        ws = socket(ticket.pk, after=last, headers=headers)
        await ws.connect()
        assert await ws.receive_json_from(timeout=5) == {
            "type": "token",
            "step": step_id,
            "offset": 0,
            "text": "Your kettle ships ",
        }
        assert (await ws.receive_json_from(timeout=5))["type"] == "ready"
        # Live pieces follow with their own offsets.
        await database_sync_to_async(realtime.stream_token)(ticket.pk, step_id, 18, "today.")
        assert await ws.receive_json_from(timeout=5) == {
            "type": "token",
            "step": step_id,
            "offset": 18,
            "text": "today.",
        }
        await ws.disconnect()

    try:
        run(scenario)
    finally:
        realtime.stream_finished(ticket.pk, step_id)


# --- live ---------------------------------------------------------------------------------------


def test_committed_public_events_reach_the_watcher_live_and_internal_ones_do_not(customer, ticket):
    headers = session_cookie(customer)
    last = public_seqs(ticket)[-1]

    async def scenario() -> None:
        ws = socket(ticket.pk, after=last, headers=headers)
        await ws.connect()
        await until_ready(ws)

        await database_sync_to_async(services.message_post)(
            ticket=ticket.pk, author_kind=AuthorKind.STAFF, body="Internal: refund looks fine", is_public=False
        )
        assert await ws.receive_nothing(timeout=0.5)

        await database_sync_to_async(services.ticket_transition)(
            ticket=ticket.pk, to_status=TicketStatus.PENDING_APPROVAL, actor_kind=ActorKind.AGENT
        )
        frame = await ws.receive_json_from(timeout=5)
        assert (frame["type"], frame["kind"], frame["status"]) == ("event", "state", "pending_approval")

        await database_sync_to_async(services.event_append)(
            ticket=ticket.pk,
            kind="approval_decided",
            actor_kind=ActorKind.STAFF,
            payload={"decision": "approved", "label": "Refund of $49.99 approved"},
            is_public=True,
        )
        frame = await ws.receive_json_from(timeout=5)
        assert (frame["kind"], frame["tone"], frame["text"]) == ("notice", "ok", "Refund of $49.99 approved")
        await ws.disconnect()

    run(scenario)


def test_a_socket_left_idle_longer_than_the_layers_wait_still_gets_what_happens_next(customer, ticket):
    """The channel layer waits for messages 5 s at a time; an idle chat must not break on it."""
    headers = session_cookie(customer)
    last = public_seqs(ticket)[-1]

    async def scenario() -> None:
        ws = socket(ticket.pk, after=last, headers=headers)
        await ws.connect()
        await until_ready(ws)
        assert await ws.receive_nothing(timeout=7)
        await database_sync_to_async(services.ticket_transition)(
            ticket=ticket.pk, to_status=TicketStatus.PENDING_APPROVAL, actor_kind=ActorKind.AGENT
        )
        frame = await ws.receive_json_from(timeout=5)
        assert (frame["type"], frame["kind"], frame["status"]) == ("event", "state", "pending_approval")
        await ws.disconnect()

    run(scenario)


def test_a_customer_message_event_carries_the_senders_client_message_id(customer, ticket):
    headers = session_cookie(customer)
    last = public_seqs(ticket)[-1]

    async def scenario() -> None:
        ws = socket(ticket.pk, after=last, headers=headers)
        await ws.connect()
        await until_ready(ws)
        await database_sync_to_async(services.message_post)(
            ticket=ticket.pk,
            author_kind=AuthorKind.CUSTOMER,
            author_user=customer.user,
            body="<b>still</b> waiting",
            client_msg_id="browser-7",
        )
        frame = await ws.receive_json_from(timeout=5)
        assert (frame["kind"], frame["author"], frame["text"], frame["client_msg_id"]) == (
            "message",
            "customer",
            "<b>still</b> waiting",  # plain text; the page sets it with textContent
            "browser-7",
        )
        await ws.disconnect()

    run(scenario)


def test_streamed_tokens_reach_the_watcher_with_their_step_and_offset(customer, ticket):
    headers = session_cookie(customer)
    step_id = 880002
    last = public_seqs(ticket)[-1]

    async def scenario() -> None:
        ws = socket(ticket.pk, after=last, headers=headers)
        await ws.connect()
        await until_ready(ws)
        await database_sync_to_async(realtime.stream_token)(ticket.pk, step_id, 0, "Hello ")
        await database_sync_to_async(realtime.stream_token)(ticket.pk, step_id, 6, "there")
        # Two frames, or one when the second piece queued up behind the first (they are joined):
        # each frame says where its text starts, and together they are the text, in order.
        text = ""
        while text != "Hello there":
            frame = await ws.receive_json_from(timeout=5)
            assert frame["type"] == "token" and frame["step"] == step_id and frame["offset"] == len(text)
            text += frame["text"]
        # A browser that saw a gap asks again and gets the whole text at offset 0.
        await ws.send_json_to({"type": "resync"})
        assert await ws.receive_json_from(timeout=5) == {
            "type": "token",
            "step": step_id,
            "offset": 0,
            "text": "Hello there",
        }
        # Asked again at once, it is not answered again (each costs a query and a Redis read).
        await ws.send_json_to({"type": "resync"})
        assert await ws.receive_nothing(timeout=0.3)
        await ws.disconnect()

    try:
        run(scenario)
    finally:
        realtime.stream_finished(ticket.pk, step_id)


def test_a_token_goes_out_while_the_socket_is_still_reading_an_earlier_event(customer, ticket, monkeypatch):
    """The run's "typing" event rings just before the answer streams: its ledger read must not
    hold the first token back."""
    headers = session_cookie(customer)
    last = public_seqs(ticket)[-1]
    reading, release = threading.Event(), threading.Event()
    load = TicketConsumer._load

    def slow_load(self: TicketConsumer, after: int) -> Any:
        reading.set()
        assert release.wait(10)
        return load(self, after)

    async def scenario() -> None:
        ws = socket(ticket.pk, after=last, headers=headers)
        await ws.connect()
        await until_ready(ws)
        monkeypatch.setattr(TicketConsumer, "_load", slow_load)
        await database_sync_to_async(services.ticket_transition)(
            ticket=ticket.pk, to_status=TicketStatus.PENDING_APPROVAL, actor_kind=ActorKind.AGENT
        )
        try:
            assert await asyncio.get_running_loop().run_in_executor(None, reading.wait, 5)
            # Sent from here, not from a thread: the consumer's read holds Django's thread.
            await get_channel_layer().group_send(
                realtime.group_name(ticket.pk), {"type": "ticket.token", "step": 880003, "offset": 0, "text": "Hi"}
            )
            assert await ws.receive_json_from(timeout=5) == {"type": "token", "step": 880003, "offset": 0, "text": "Hi"}
        finally:
            release.set()
        frame = await ws.receive_json_from(timeout=5)
        assert (frame["type"], frame["kind"], frame["status"]) == ("event", "state", "pending_approval")
        await ws.disconnect()

    run(scenario)


# --- origins: scheme, host and port must all match ----------------------------------------------


@pytest.mark.parametrize(
    ("origin", "host", "allowed"),
    [
        ("http://127.0.0.1:8000", "127.0.0.1:8000", True),
        ("http://127.0.0.1:9876", "127.0.0.1:8000", False),  # another port on the same host
        ("https://127.0.0.1:8000", "127.0.0.1:8000", False),  # another scheme
        ("http://localhost:8000", "127.0.0.1:8000", False),  # another host name
        ("", "127.0.0.1:8000", False),  # no Origin at all
        ("null", "127.0.0.1:8000", False),
        ("http://evil.example:8000", "evil.example:8000", False),  # not in ALLOWED_HOSTS
        ("https://support.example.com", "127.0.0.1:8000", True),  # CSRF_TRUSTED_ORIGINS
        ("https://support.example.com:8443", "127.0.0.1:8000", False),
        ("http://[::1]:8000", "[::1]:8000", True),  # an IPv6 host, bracketed in ALLOWED_HOSTS
        ("http://[::1]:8001", "[::1]:8000", False),
        ("http://[::2]:8000", "[::2]:8000", False),  # an IPv6 host ALLOWED_HOSTS does not list
        # An Origin is scheme, host and port, nothing else: no browser sends more, so more is no page's.
        ("http://127.0.0.1:8000/", "127.0.0.1:8000", False),
        ("http://127.0.0.1:8000/chat", "127.0.0.1:8000", False),
        ("http://127.0.0.1:8000?x=1", "127.0.0.1:8000", False),
        ("http://127.0.0.1:8000#x", "127.0.0.1:8000", False),
        ("http://someone@127.0.0.1:8000", "127.0.0.1:8000", False),
        ("http://127.0.0.1:8000 ", "127.0.0.1:8000", False),
        ("https://support.example.com/", "127.0.0.1:8000", False),
        # A trusted origin does not make any Host one of this site's (Django's pages answer it 400).
        ("https://support.example.com", "evil.example:8000", False),
        ("https://support.example.com", "", False),  # no Host at all
    ],
)
def test_a_socket_opens_only_from_an_exactly_allowed_origin(customer, ticket, settings, origin, host, allowed):
    settings.CSRF_TRUSTED_ORIGINS = ["https://support.example.com"]
    settings.ALLOWED_HOSTS = [*settings.ALLOWED_HOSTS, "[::1]"]
    cookie = session_cookie(customer)[-1]
    headers = (
        ([(b"host", host.encode())] if host else []) + [cookie] + ([(b"origin", origin.encode())] if origin else [])
    )

    async def scenario() -> None:
        ws = socket(ticket.pk, headers=headers)
        connected, code = await ws.connect()
        if allowed:
            assert connected
            assert (await until_ready(ws)) is not None
            await ws.disconnect()
        else:
            assert not connected and code == 4403

    run(scenario)


@pytest.mark.parametrize(
    ("origin", "forwarded_proto", "allowed"),
    [
        ("https://support.example.com", "https", True),  # the site's own page, through the TLS proxy
        ("https://support.example.com", "https, http", True),  # the first value counts, as Django reads it
        ("http://support.example.com", "https", False),  # the socket came in over TLS: another scheme
        ("https://support.example.com", "http", False),
        ("http://support.example.com", None, True),  # no header: the scope's scheme (ws)
    ],
)
def test_behind_a_tls_proxy_the_sites_own_https_page_opens_its_socket(
    customer, ticket, settings, origin, forwarded_proto, allowed
):  # noqa: ANN001
    """The socket's scheme came from the ASGI scope, which daphne leaves at ws behind a proxy: the
    page's own https origin was "another scheme" and refused (4403) unless listed in
    CSRF_TRUSTED_ORIGINS. It is read from SECURE_PROXY_SSL_HEADER, as Django's forms read it."""
    settings.ALLOWED_HOSTS = ["support.example.com"]
    settings.CSRF_TRUSTED_ORIGINS = []
    settings.SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    headers = [(b"host", b"support.example.com"), (b"origin", origin.encode()), session_cookie(customer)[-1]]
    if forwarded_proto is not None:
        headers.append((b"x-forwarded-proto", forwarded_proto.encode()))

    async def scenario() -> None:
        ws = socket(ticket.pk, headers=headers)
        connected, code = await ws.connect()
        if connected:
            await ws.disconnect()
        assert (connected, code if not connected else None) == (allowed, None if allowed else 4403)

    run(scenario)


# --- bad frames and paths: an error frame, a live connection ------------------------------------


def test_unknown_socket_paths_are_closed_with_not_found(customer):
    headers = session_cookie(customer)

    async def scenario() -> None:
        for path in ("/ws/nowhere/", "/ws/tickets/abc/"):
            ws = WebsocketCommunicator(application, path, headers=headers)
            connected, _ = await ws.connect()
            assert connected
            assert await ws.receive_output(timeout=5) == {"type": "websocket.close", "code": 4404}

    run(scenario)


def _nested(depth: int) -> list:
    value: list = [1]
    for _ in range(depth):
        value = [value]
    return value


def test_binary_broken_and_deeply_nested_frames_get_an_error_and_the_socket_stays_open(customer, ticket):
    headers = session_cookie(customer)

    async def scenario() -> None:
        ws = socket(ticket.pk, after=0, headers=headers)
        await ws.connect()
        await until_ready(ws)
        bad = [
            {"bytes_data": b"\x00\xff binary"},
            {"text_data": "not json {"},
            {"text_data": "[" * 50_000 + "]" * 50_000},
            {"text_data": json.dumps({"type": "resync", "nested": _nested(30)})},
            {"text_data": "x" * 100_000},
        ]
        for frame in bad:
            await ws.send_to(**frame)
            answer = await ws.receive_json_from(timeout=5)
            assert answer["type"] == "error" and answer["error"], frame
        # Still open and still serving: a new message reaches it live.
        await database_sync_to_async(services.message_post)(
            ticket=ticket.pk, author_kind=AuthorKind.AGENT, body="Still here."
        )
        frame = await ws.receive_json_from(timeout=5)
        assert frame["type"] == "event" and "Still here." in json.dumps(frame)
        await ws.disconnect()

    run(scenario)
