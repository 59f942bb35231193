"""A shared browser: another customer signs in, in another tab, while the first one's chat is open. The
chat tab is not theirs any more: a message sent from it was answered with a bare 404 page, and the tab
said "Not sent: please try again." (again at every try) and, on its socket, "This conversation is not
available.", with no way back. It now says the conversation is not the signed-in account's, keeps the
message, and offers to sign in again; signed in as its customer, the message is back in the box."""

from __future__ import annotations

import pytest

from tests.browser.conftest import PASSWORD, Stack, sign_in
from tests.browser.test_chat_after_signing_in_again_elsewhere import sign_out_and_in_again_in_another_tab
from tests.browser.test_customer_chat import wait_for_agent_messages
from tests.conftest import make_customer
from tests.workers import wait_until
from tickets import services as ticket_services
from tickets.models import AuthorKind, Message

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True), pytest.mark.timeout(120)]


def test_a_chat_tab_of_a_customer_another_signed_in_over_keeps_the_message_and_offers_to_sign_in(live: Stack, browser):  # noqa: ANN001
    alice, bob = make_customer("alice"), make_customer("bob")
    ticket, _ = ticket_services.ticket_open(customer=alice, subject="Alice's kettle", body="Hello there")
    page = sign_in(browser, live, alice)
    page.goto(live.url(f"/tickets/{ticket.pk}/"))
    wait_for_agent_messages(page, 1)
    page.wait_for_function("() => !window.__chat.state().typing")

    sign_out_and_in_again_in_another_tab(page, live, bob.user.username)
    banner = page.locator("#chat-connection")
    banner.get_by_role("link", name="Sign in again").wait_for()
    text = "Please send the new kettle to my office."
    page.fill("#chat-input", text)
    page.press("#chat-input", "Enter")

    failure = page.locator("#chat-log li.msg.from-customer.failed .msg-error")
    failure.wait_for()
    assert failure.inner_text().startswith("Not sent: this conversation is not open to the account signed in")
    assert not Message.objects.filter(body=text).exists()  # on no ticket, Bob's least of all

    failure.get_by_role("link", name="Sign in again").click()
    page.fill("#id_username", alice.user.username)
    page.fill("#id_password", PASSWORD)
    page.click("main form button[type=submit]")
    page.wait_for_url(live.url(f"/tickets/{ticket.pk}/"))
    assert page.input_value("#chat-input") == text
    page.press("#chat-input", "Enter")
    wait_until(
        lambda: Message.objects.filter(ticket=ticket, author_kind=AuthorKind.CUSTOMER, body=text).count() == 1,
        timeout=30,
        what="the message to be stored on Alice's ticket",
    )
    page.context.close()
