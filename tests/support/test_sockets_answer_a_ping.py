"""Every live page's socket answers ``{"type": "ping"}`` with ``{"type": "pong"}`` and stays open: a
page whose socket has been quiet for a while asks whether it still carries anything (a half-open
connection, after a laptop changed networks, never closes on its own). Only the customer's chat
socket answered; a staff page's got an error frame, and its page could not tell a live socket from a
dead one."""

from __future__ import annotations

import pytest
from channels.testing import WebsocketCommunicator

from support.asgi import application
from tests.conftest import make_customer
from tests.staff.conftest import make_support_staff
from tests.staff.test_consumer import staff_headers, staff_socket
from tests.tickets.test_consumer import run, session_cookie, socket, until_ready
from tests.workers import purge_stream_buffers
from tickets import services

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _no_stream_left_over() -> None:
    purge_stream_buffers()  # ticket ids restart with each test database


def page_socket(page: str) -> WebsocketCommunicator:
    customer = make_customer()
    ticket, _ = services.ticket_open(customer=customer, subject="Kettle", body="Where is my kettle?")
    if page == "chat":
        return socket(ticket.pk, headers=session_cookie(customer))
    headers = staff_headers(make_support_staff("sam"))
    if page == "staff conversation":
        return staff_socket(ticket.pk, headers)
    return WebsocketCommunicator(application, "/ws/staff/approvals/", headers=headers)


@pytest.mark.parametrize("page", ["chat", "staff conversation", "approval dashboard"])
def test_a_live_pages_socket_answers_a_ping_with_a_pong_and_stays_open(page):  # noqa: ANN001
    ws = page_socket(page)

    async def scenario() -> None:
        assert (await ws.connect())[0]
        await until_ready(ws)
        for _ in range(2):  # answered, and still open to be asked again
            await ws.send_json_to({"type": "ping"})
            assert await ws.receive_json_from(timeout=5) == {"type": "pong"}
        await ws.disconnect()

    run(scenario)
