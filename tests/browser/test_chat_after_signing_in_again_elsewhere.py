"""A customer signed out and in again in another tab: the chat tab opened before goes on working.

Signing in again gives the browser a new CSRF secret (Django rotates it at sign-in), so the token the
chat page was rendered with no longer matches; and the chat's socket was closed at the sign-out.
"""

from __future__ import annotations

import pytest

from tests.browser.conftest import PASSWORD, Stack, sign_in
from tests.browser.test_customer_chat import wait_for_agent_messages
from tests.conftest import make_customer
from tickets import services as ticket_services
from tickets.models import AuthorKind, Message

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True), pytest.mark.timeout(120)]


def sign_out_and_in_again_in_another_tab(page, live: Stack, username: str) -> None:  # noqa: ANN001
    other = page.context.new_page()
    other.goto(live.url("/tickets/"))
    other.click("header form button[type=submit]")  # Sign out
    other.wait_for_url("**/accounts/login/**")
    other.goto(live.url("/accounts/login/"))
    other.fill("#id_username", username)
    other.fill("#id_password", PASSWORD)
    other.click("main form button[type=submit]")
    other.wait_for_url(live.url("/tickets/"))
    other.close()


def test_a_chat_tab_sends_and_shows_replies_after_signing_in_again_in_another_tab(live: Stack, browser):  # noqa: ANN001
    customer = make_customer()
    ticket, _ = ticket_services.ticket_open(customer=customer, subject="Two tabs", body="Hello there")
    page = sign_in(browser, live, customer)
    page.goto(live.url(f"/tickets/{ticket.pk}/"))
    wait_for_agent_messages(page, 1)
    page.wait_for_function("() => !window.__chat.state().typing")

    sign_out_and_in_again_in_another_tab(page, live, customer.user.username)
    page.locator("#chat-connection", has_text="You were signed out").wait_for()  # the socket ended with the sign-out

    text = "Where is my order A-1001?"
    page.fill("#chat-input", text)
    page.press("#chat-input", "Enter")
    page.wait_for_function(
        "t => [...document.querySelectorAll('#chat-log li.msg.from-customer')].some("
        "li => li.textContent.includes(t) && !li.classList.contains('sending'))",
        arg=text,
    )
    assert page.locator("#chat-log .msg-error").count() == 0, page.locator("#chat-log .msg-error").all_inner_texts()
    assert Message.objects.filter(ticket=ticket, author_kind=AuthorKind.CUSTOMER, body=text).count() == 1

    # Signed in again, the tab is live again: the answer to what it sent shows there.
    wait_for_agent_messages(page, 2)
    page.wait_for_function("() => window.__chat.state().connected")
    assert page.locator("#chat-connection").is_hidden()
    assert page.evaluate("() => window.__csp") == []
