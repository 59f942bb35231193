"""The chat used with the keyboard alone: Enter sends, Shift+Enter starts a new line, and after a
send, by Enter in the box or by the Send button, the next message is typed straight away."""

from __future__ import annotations

import pytest

from tests.browser.conftest import Stack, sign_in
from tests.browser.test_customer_chat import wait_for_agent_messages
from tests.conftest import make_customer
from tests.workers import wait_until
from tickets import services as ticket_services
from tickets.models import AuthorKind, Message

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True), pytest.mark.timeout(120)]


def test_after_sending_with_the_send_button_the_next_message_is_typed_in_the_box(live: Stack, browser):  # noqa: ANN001
    customer = make_customer()
    ticket, _ = ticket_services.ticket_open(customer=customer, subject="Keyboard", body="Hello there")
    page = sign_in(browser, live, customer)
    page.goto(live.url(f"/tickets/{ticket.pk}/"))
    wait_for_agent_messages(page, 1)
    assert page.evaluate("document.activeElement.id") == "chat-input"  # ready to type on open

    page.keyboard.type("First line")
    page.keyboard.press("Shift+Enter")
    page.keyboard.type("second line")
    assert page.input_value("#chat-input") == "First line\nsecond line"
    page.keyboard.press("Tab")  # past the box: the Send button
    assert page.evaluate("document.activeElement.id") == "chat-send"
    page.keyboard.press("Enter")

    page.wait_for_function("() => document.getElementById('chat-input').value === ''")
    assert page.evaluate("document.activeElement.id") == "chat-input"
    page.keyboard.type("And a second message")
    page.keyboard.press("Enter")

    texts = ["First line\nsecond line", "And a second message"]
    wait_until(
        lambda: (
            list(
                Message.objects.filter(ticket=ticket, author_kind=AuthorKind.CUSTOMER, body__in=texts)
                .order_by("created_at", "id")
                .values_list("body", flat=True)
            )
            == texts
        ),
        timeout=15,
        what="both messages stored in order",
    )
