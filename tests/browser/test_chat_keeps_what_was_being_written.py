"""Words still in the chat's box, not sent, when the page goes: the customer's session ended while they
wrote, the page said so with a "Sign in again" link, and following it lost the words they were writing
(only a send refused for the sign-out kept its text). They are in the box again when the chat is back."""

from __future__ import annotations

import pytest
from django.contrib.sessions.models import Session

from tests.browser.conftest import PASSWORD, Stack, sign_in
from tests.browser.test_chat_message_left_unsent_when_the_ticket_closed import WORDS, kept_and_carried_to_a_new_ticket
from tests.browser.test_customer_chat import wait_for_agent_messages
from tests.conftest import make_customer
from tests.staff.conftest import make_support_staff
from tests.workers import wait_until
from tickets import services as ticket_services
from tickets.models import AuthorKind, Message

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True), pytest.mark.timeout(120)]


def test_words_being_written_when_the_session_ended_are_in_the_box_after_signing_in_again(live: Stack, browser):  # noqa: ANN001
    customer = make_customer()
    ticket, _ = ticket_services.ticket_open(customer=customer, subject="Long letter", body="Hello there")
    page = sign_in(browser, live, customer)
    page.goto(live.url(f"/tickets/{ticket.pk}/"))
    wait_for_agent_messages(page, 1)
    page.fill("#chat-input", "The parcel came without the lid,\nand the box was")

    Session.objects.all().delete()  # the session ended on the server while they wrote
    page.evaluate("() => window.__chat.dropSocket(0)")  # the socket, reconnecting, is told so
    banner = page.locator("#chat-connection")
    banner.get_by_role("link", name="Sign in again").click()
    page.fill("#id_username", customer.user.username)
    page.fill("#id_password", PASSWORD)
    page.click("main form button[type=submit]")
    page.wait_for_url(live.url(f"/tickets/{ticket.pk}/"))

    assert page.input_value("#chat-input") == "The parcel came without the lid,\nand the box was"
    page.type("#chat-input", " crushed.")
    page.press("#chat-input", "Enter")
    text = "The parcel came without the lid,\nand the box was crushed."
    wait_until(
        lambda: Message.objects.filter(ticket=ticket, author_kind=AuthorKind.CUSTOMER, body=text).count() == 1,
        timeout=30,
        what="the message to be stored",
    )
    page.reload()  # sent: the box is empty again, nothing comes back
    page.wait_for_function("() => window.__chat.state().connected")
    assert page.input_value("#chat-input") == ""
    page.context.close()


def test_words_being_written_come_back_after_a_reload(live: Stack, browser):  # noqa: ANN001
    customer = make_customer()
    ticket, _ = ticket_services.ticket_open(customer=customer, subject="Reloaded", body="Hello there")
    page = sign_in(browser, live, customer)
    page.goto(live.url(f"/tickets/{ticket.pk}/"))
    wait_for_agent_messages(page, 1)
    page.fill("#chat-input", "Half a thought")
    page.reload()
    page.wait_for_function("() => window.__chat.state().connected")
    assert page.input_value("#chat-input") == "Half a thought"
    page.context.close()


def test_words_being_written_on_a_ticket_closed_while_away_are_kept_and_can_go_in_a_new_ticket(live: Stack, browser):  # noqa: ANN001
    customer = make_customer()
    ticket, _ = ticket_services.ticket_open(customer=customer, subject="Closed while away", body="Hello there")
    page = sign_in(browser, live, customer)
    page.goto(live.url(f"/tickets/{ticket.pk}/"))
    wait_for_agent_messages(page, 1)
    page.fill("#chat-input", WORDS)
    page.goto(live.url("/tickets/"))  # away, the words unsent
    ticket_services.ticket_close(ticket=ticket.pk, user=make_support_staff("closer"))

    page.go_back()
    page.locator("#chat-note", has_text="This ticket is closed").wait_for()

    assert not Message.objects.filter(ticket=ticket, body=WORDS).exists()
    kept_and_carried_to_a_new_ticket(page, live)
    page.context.close()
