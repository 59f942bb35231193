"""A session cookie the database could never have issued is no session, never a server error.

Django reads a quoted cookie's octal escapes, so ``sessionid="abcdefghij\\000"`` reaches the session
store as a key holding a NUL character, which PostgreSQL refuses in a query: every page, the sign-in
form itself and the chat socket failed (a 500, a crashed handshake) for a browser carrying it, until
its cookies were cleared. Such a key is now no session: the visitor is simply signed out.
"""

from __future__ import annotations

import pytest
from asgiref.sync import async_to_sync
from channels.testing import WebsocketCommunicator
from django.test import Client

from support.asgi import application
from tests.conftest import make_customer
from tickets import services

pytestmark = pytest.mark.django_db(transaction=True)

UNSTORABLE = ['sessionid="abcdefghij\\000klmnop"', 'sessionid="\\000\\000\\000\\000\\000\\000\\000\\000"']


@pytest.mark.parametrize("cookie", UNSTORABLE)
def test_pages_and_the_sign_in_answer_a_browser_whose_session_cookie_holds_a_nul(cookie):
    customer = make_customer()
    browser = Client(raise_request_exception=False, HTTP_COOKIE=cookie)

    assert browser.get("/").status_code == 302  # to the sign-in page: no session
    assert browser.get("/tickets/").status_code == 302
    assert browser.get("/accounts/login/").status_code == 200
    signed_in = browser.post("/accounts/login/", {"username": customer.user.username, "password": "pw-for-tests-123"})
    assert signed_in.status_code == 302
    assert browser.cookies["sessionid"].value.isalnum()  # a new session, issued by the site


@pytest.mark.parametrize("cookie", UNSTORABLE)
def test_the_chat_socket_refuses_a_session_cookie_holding_a_nul_as_signed_out(cookie):
    ticket, _ = services.ticket_open(customer=make_customer(), subject="Kettle", body="Where is my kettle?")
    headers = [(b"origin", b"http://127.0.0.1"), (b"host", b"127.0.0.1"), (b"cookie", cookie.encode())]

    async def scenario() -> dict:
        ws = WebsocketCommunicator(application, f"/ws/tickets/{ticket.pk}/", headers=headers)
        await ws.connect(timeout=5)
        return await ws.receive_output(timeout=5)

    assert async_to_sync(scenario)() == {"type": "websocket.close", "code": 4403}
