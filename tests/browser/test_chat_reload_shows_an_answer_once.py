# ruff: noqa: F401, F811, E501, ANN001, ANN201
"""A chat opened just after an answer was posted (its streamed text not yet cleared) shows it once."""

from __future__ import annotations

import pytest

from tests.browser.conftest import (  # noqa: F401 - fixtures
    Stack,
    _fast_password_hashing,
    _orm_beside_playwright,
    browser,
    live,
    sign_in,
    stack,
)
from tests.browser.test_customer_chat import wait_for_agent_messages
from tests.conftest import make_customer
from tickets import realtime
from tickets import services as ticket_services
from tickets.models import AuthorKind, Message, TicketEvent

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True), pytest.mark.timeout(120)]


def test_a_page_opened_just_after_an_answer_was_posted_shows_it_once(live: Stack, browser):  # noqa: ANN001, F811
    """The reply commits before its streamed text is cleared (or the worker stops in between): a page
    opened then shows the message, and the socket does not send the stream again beside it."""
    customer = make_customer()
    ticket, _ = ticket_services.ticket_open(customer=customer, subject="Hello", body="Hello there")
    page = sign_in(browser, live, customer)
    page.goto(live.url(f"/tickets/{ticket.pk}/"))
    wait_for_agent_messages(page, 1)
    page.wait_for_function("() => !window.__chat.state().typing")
    page.close()

    reply = Message.objects.filter(ticket=ticket, author_kind=AuthorKind.AGENT).latest("created_at")
    event = TicketEvent.objects.get(ticket=ticket, kind="message", payload__message_id=reply.pk)
    stream = event.payload.get("stream")
    assert isinstance(stream, int), "the reply was streamed"
    # The buffer as it stands between the reply's commit and stream_finished.
    realtime.stream_token(ticket.pk, stream, 0, reply.body)

    page = page.context.new_page()
    page.goto(live.url(f"/tickets/{ticket.pk}/"))
    page.wait_for_function("() => window.__chat.state().connected")
    page.wait_for_timeout(300)
    shown = page.inner_text("#chat-scroll")
    assert page.locator("#chat-live .streaming").count() == 0, "a second, streaming copy of a posted answer"
    assert shown.count(reply.body.strip()[:60]) == 1, shown
    page.context.close()
