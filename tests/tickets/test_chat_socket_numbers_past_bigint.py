"""Numbers a browser sends on the chat socket past PostgreSQL's bigint: ``?after=`` was taken as any
whole number and a ``seen`` frame clamped only to it, so ``ticket_mark_seen`` sent the number to the
database, psycopg raised OverflowError and the consumer died. They are clamped to the timeline's
range (``after`` to the timeline's end): the socket stays open and serves what comes next, and the
read mark never passes the timeline's end."""

from __future__ import annotations

import json

import pytest
from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator
from django.test import Client
from django.urls import reverse

from support.asgi import application
from tests.conftest import make_customer
from tests.staff.conftest import make_support_staff
from tests.tickets.test_consumer import run, session_cookie, until_ready
from tests.workers import purge_stream_buffers
from tickets import services
from tickets.models import AuthorKind, Ticket

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _no_stream_left_over() -> None:
    purge_stream_buffers()


@pytest.mark.parametrize("seq", [2**63, 10**30])
def test_a_seen_frame_past_bigint_leaves_the_chat_socket_open(customer, seq):  # noqa: ANN001
    ticket, _ = services.ticket_open(customer=customer, subject="Kettle", body="Where is my kettle?")
    shown = Ticket.objects.get(pk=ticket.pk).last_event_seq
    headers = session_cookie(customer)

    async def scenario() -> None:
        ws = WebsocketCommunicator(application, f"/ws/tickets/{ticket.pk}/?after={seq}", headers=headers)
        assert (await ws.connect())[0]
        await until_ready(ws)
        await ws.send_to(text_data=json.dumps({"type": "seen", "seq": seq}))
        await database_sync_to_async(services.message_post)(
            ticket=ticket.pk, author_kind=AuthorKind.AGENT, body="Still here."
        )
        frame = await ws.receive_json_from(timeout=5)  # still open: the doorbell is answered
        assert frame["type"] in {"event", "error"}, frame
        await ws.disconnect()

    run(scenario)
    ticket.refresh_from_db()
    assert shown <= ticket.customer_seen_seq <= ticket.last_event_seq


def test_the_staff_timeline_after_a_number_past_bigint_says_a_number_the_page_can_send_back():
    """``?after=`` past a bigint came back as the page's ``last_seq``, which its forms then sent as
    ``seen``: too long to be read, so Resolve and Close checked nothing."""
    ticket, _ = services.ticket_open(customer=make_customer(), subject="Kettle", body="Where is it?")
    staff = Client()
    staff.force_login(make_support_staff("maria"))
    answer = staff.get(reverse("staff:timeline", args=[ticket.pk]), {"after": str(2**64)})
    assert answer.status_code == 200
    assert answer.json()["last_seq"] <= 2**63 - 1
