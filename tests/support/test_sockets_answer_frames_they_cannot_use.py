"""A frame a socket cannot use is answered with an error frame that says what the socket reads, and
the socket stays open: a frame of a type it does not know (or that is not an object), and a ``seen``
without a whole-number ``seq``. They were dropped without a word, as if read (unreadable JSON and
binary frames were already answered so)."""

from __future__ import annotations

import pytest
from channels.testing import WebsocketCommunicator

from support.asgi import application
from tests.conftest import make_customer
from tests.staff.conftest import make_support_staff
from tests.staff.test_consumer import staff_headers, staff_socket
from tests.tickets.test_consumer import run, session_cookie, until_ready
from tickets import services
from tickets.models import Ticket

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.mark.parametrize(
    ("frame", "words"),
    [
        ('{"type": "message", "body": "hello"}', "resync, seen"),
        ('{"type": 5}', "resync, seen"),
        ('{"kind": "seen"}', "resync, seen"),
        ("[]", "resync, seen"),
        ("null", "resync, seen"),
        ('{"type": "seen", "seq": "3"}', "whole number"),
        ('{"type": "seen", "seq": 1.5}', "whole number"),
        ('{"type": "seen"}', "whole number"),
        ('{"type": "seen", "seq": true}', "whole number"),
    ],
)
def test_the_chat_socket_answers_a_frame_it_cannot_use_and_stays_open(frame, words):
    customer = make_customer()
    ticket, _ = services.ticket_open(customer=customer, subject="Kettle", body="Where is my kettle?")
    headers = session_cookie(customer)

    async def scenario() -> None:
        ws = WebsocketCommunicator(application, f"/ws/tickets/{ticket.pk}/", headers=headers)
        await ws.connect()
        await until_ready(ws)
        await ws.send_to(text_data=frame)
        answer = await ws.receive_json_from(timeout=5)
        assert answer["type"] == "error" and words in answer["error"], answer
        await ws.send_to(text_data='{"type": "seen", "seq": 1}')  # still read
        assert await ws.receive_nothing(timeout=0.5)
        await ws.disconnect()

    run(scenario)
    assert Ticket.objects.get(pk=ticket.pk).customer_seen_seq == 1


def test_a_staff_socket_says_it_reads_only_ping():
    ticket, _ = services.ticket_open(customer=make_customer(), subject="Kettle", body="Where is my kettle?")
    headers = staff_headers(make_support_staff("frames"))

    async def scenario() -> None:
        ws = staff_socket(ticket.pk, headers)
        assert (await ws.connect())[0]
        assert await ws.receive_json_from(timeout=5) == {"type": "ready"}
        await ws.send_to(text_data='{"type": "reply", "body": "hello"}')
        answer = await ws.receive_json_from(timeout=5)
        assert answer["type"] == "error" and answer["error"].endswith("this socket reads ping."), answer
        await ws.disconnect()

    run(scenario)
