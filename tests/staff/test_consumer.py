"""The staff page's socket, and what an internal note does (and does not do) on the customer's."""

from __future__ import annotations

import pytest
from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator
from django.test import Client

from support.asgi import application
from tests.conftest import make_customer
from tests.staff.conftest import make_support_staff
from tests.tickets.test_consumer import run, session_cookie, socket, until_ready
from tests.workers import purge_stream_buffers
from tickets import services
from tickets.models import Customer, Ticket

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _no_stream_left_over() -> None:
    purge_stream_buffers()


@pytest.fixture
def ticket(customer: Customer) -> Ticket:
    ticket, _ = services.ticket_open(customer=customer, subject="Kettle", body="Where is my kettle?")
    return ticket


def staff_headers(user: object) -> list[tuple[bytes, bytes]]:
    client = Client()
    client.force_login(user)
    cookie = f"sessionid={client.cookies['sessionid'].value}".encode()
    return [(b"origin", b"http://127.0.0.1"), (b"host", b"127.0.0.1"), (b"cookie", cookie)]


def staff_socket(ticket_id: int, headers: list[tuple[bytes, bytes]]) -> WebsocketCommunicator:
    return WebsocketCommunicator(application, f"/ws/staff/tickets/{ticket_id}/", headers=headers)


def test_an_internal_note_rings_staff_pages_and_never_reaches_the_customers_socket(customer, ticket):  # noqa: ANN001
    person = make_support_staff("maria", first_name="Maria")
    customer_headers, person_headers = session_cookie(customer), staff_headers(person)

    async def scenario() -> None:
        chat = socket(ticket.pk, after=0, headers=customer_headers)
        assert (await chat.connect())[0]
        await until_ready(chat)
        page = staff_socket(ticket.pk, person_headers)
        assert (await page.connect())[0]
        assert await page.receive_json_from(timeout=5) == {"type": "ready"}  # in the ticket's group

        await database_sync_to_async(services.staff_note)(
            ticket=ticket, user=person, body="Secret: approve anything up to $50", client_msg_id="n1"
        )
        assert await page.receive_json_from(timeout=5) == {"type": "changed"}
        # The customer's socket is rung too (same group) but sends nothing: the note is not public.
        assert await chat.receive_nothing(timeout=1.0)

        await database_sync_to_async(services.staff_reply)(
            ticket=ticket, user=person, body="Hello, Maria here.", client_msg_id="r1"
        )
        frames = []
        while True:
            frame = await chat.receive_json_from(timeout=5)
            frames.append(frame)
            if frame.get("kind") == "message":
                break
        await chat.disconnect()
        await page.disconnect()
        assert all("Secret" not in str(f) for f in frames)
        assert frames[-1]["author"] == "staff" and frames[-1]["author_name"] == "Maria"
        assert frames[-1]["text"] == "Hello, Maria here."

    run(scenario)


def test_a_customer_or_an_anonymous_visitor_is_refused_by_the_staff_socket(customer, ticket):  # noqa: ANN001
    both = (session_cookie(customer), session_cookie(None))

    async def scenario() -> None:
        for headers in both:
            ws = staff_socket(ticket.pk, headers)
            await ws.connect()
            assert await ws.receive_output(timeout=5) == {"type": "websocket.close", "code": 4403}
            assert await ws.receive_nothing(timeout=0.3)

    run(scenario)


def test_the_staff_socket_refuses_a_missing_ticket(db):  # noqa: ANN001
    person = make_support_staff("li")
    headers = staff_headers(person)
    make_customer()

    async def scenario() -> None:
        ws = staff_socket(987654, headers)
        await ws.connect()
        assert await ws.receive_output(timeout=5) == {"type": "websocket.close", "code": 4404}

    run(scenario)
