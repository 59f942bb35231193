"""A message the customer wrote that never reached the ticket before staff closed it is not lost.

The chat keeps a message not yet stored in the tab (sessionStorage) and sends it again after a reload.
On a ticket closed meanwhile the page has no composer, and it neither sent nor showed the kept ones:
the customer's words vanished without a word. A send refused because the ticket was closed (the page
not told yet: its socket away) said so, but its words were gone at the next reload. Either way the
message now stays on the page, over reloads, saying why it was not sent, with a link that opens a new
ticket with its words in the form. So does the message a send refused for a sign-out kept for the
box, when the ticket was closed before the customer signed in again; and the words in the box when the
ticket closes under them (the box is disabled then: in Chromium its text cannot even be selected).
"""

from __future__ import annotations

import pytest
from django.contrib.sessions.models import Session

from tests.browser.conftest import PASSWORD, Stack
from tests.browser.test_chat_resilience import NOT_SENT, open_chat
from tests.staff.conftest import make_support_staff
from tickets import services as ticket_services
from tickets.models import Message

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True), pytest.mark.timeout(180)]

WORDS = "My kettle arrived broken, please send another."


def kept_and_carried_to_a_new_ticket(page, live: Stack) -> None:  # noqa: ANN001
    """The page shows the unsent message with the reason, again after a reload, and its link opens a new
    ticket's form with its words."""
    for _ in range(2):
        bubble = page.locator("#chat-log li.msg.from-customer.failed", has_text=WORDS)
        shown = page.inner_text("#chat-log")
        assert bubble.count() == 1, f"the unsent message is not on the closed ticket's page: {shown!r}"
        assert "closed" in bubble.locator(".msg-error").inner_text()
        page.reload()
        page.locator("#chat-note", has_text="This ticket is closed").wait_for()
    page.locator("#chat-log li.msg.failed .msg-error a", has_text="new ticket").click()
    page.wait_for_url(live.url("/tickets/new/"))
    assert page.input_value("#id_body") == WORDS


def test_a_message_kept_over_a_reload_of_a_ticket_closed_meanwhile_is_shown_and_can_go_in_a_new_ticket(
    live: Stack,
    browser,  # noqa: ANN001
):
    page, ticket = open_chat(live, browser, "Closed while unsent")
    page.route("**/messages", lambda route: route.abort("connectionreset"))
    page.fill("#chat-input", WORDS)
    page.press("#chat-input", "Enter")
    page.locator(NOT_SENT).wait_for()
    page.unroute("**/messages")
    ticket_services.ticket_close(ticket=ticket.pk, user=make_support_staff("closer"))

    page.reload()
    page.locator("#chat-note", has_text="This ticket is closed").wait_for()

    assert not Message.objects.filter(ticket=ticket, body=WORDS).exists()
    kept_and_carried_to_a_new_ticket(page, live)
    page.context.close()


def test_a_send_refused_because_the_ticket_closed_stays_over_a_reload_and_can_go_in_a_new_ticket(
    live: Stack,
    browser,  # noqa: ANN001
):
    page, ticket = open_chat(live, browser, "Closed while away")
    page.evaluate("() => window.__chat.dropSocket(600000)")  # the page does not hear of the close
    page.wait_for_function("() => !window.__chat.state().connected")
    ticket_services.ticket_close(ticket=ticket.pk, user=make_support_staff("closer"))

    page.fill("#chat-input", WORDS)
    page.press("#chat-input", "Enter")
    page.locator(NOT_SENT, has_text="closed").wait_for()

    assert not Message.objects.filter(ticket=ticket, body=WORDS).exists()
    page.reload()
    page.locator("#chat-note", has_text="This ticket is closed").wait_for()
    kept_and_carried_to_a_new_ticket(page, live)
    page.context.close()


def test_a_message_kept_over_a_sign_out_of_a_ticket_closed_meanwhile_is_shown_and_can_go_in_a_new_ticket(
    live: Stack,
    browser,  # noqa: ANN001
):
    page, ticket = open_chat(live, browser, "Closed while signed out")
    Session.objects.all().delete()  # the session ended on the server (expiry, a sign-out elsewhere)
    page.fill("#chat-input", WORDS)
    page.press("#chat-input", "Enter")
    page.locator(NOT_SENT, has_text="you were signed out").get_by_role("link", name="Sign in again").click()
    ticket_services.ticket_close(ticket=ticket.pk, user=make_support_staff("closer"))
    page.fill("#id_username", ticket.customer.user.username)
    page.fill("#id_password", PASSWORD)
    page.click("main form button[type=submit]")
    page.wait_for_url(live.url(f"/tickets/{ticket.pk}/"))
    page.locator("#chat-note", has_text="This ticket is closed").wait_for()

    assert not Message.objects.filter(ticket=ticket, body=WORDS).exists()
    kept_and_carried_to_a_new_ticket(page, live)
    page.context.close()


def test_words_in_the_box_when_the_ticket_closes_are_kept_and_can_go_in_a_new_ticket(live: Stack, browser):  # noqa: ANN001
    page, ticket = open_chat(live, browser, "Closed while writing")
    page.fill("#chat-input", WORDS)

    ticket_services.ticket_close(ticket=ticket.pk, user=make_support_staff("closer"))
    page.locator("#chat-note", has_text="This ticket is closed").wait_for()

    assert not Message.objects.filter(ticket=ticket, body=WORDS).exists()
    kept_and_carried_to_a_new_ticket(page, live)
    page.context.close()
