"""Staff close a ticket while its chat is open: the whole composer closes with it, the file picker
too (before, "Attach" still opened the picker and listed files that could never be sent)."""

from __future__ import annotations

import pytest

from tests.browser.conftest import Stack, sign_in
from tests.browser.test_customer_chat import wait_for_agent_messages
from tests.conftest import make_customer
from tests.staff.conftest import make_support_staff
from tickets import services as ticket_services

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True), pytest.mark.timeout(120)]


def test_closing_a_ticket_while_its_chat_is_open_closes_the_file_picker_too(live: Stack, browser):  # noqa: ANN001
    customer = make_customer()
    ticket, _ = ticket_services.ticket_open(customer=customer, subject="Closed live", body="Hello there")
    page = sign_in(browser, live, customer)
    page.goto(live.url(f"/tickets/{ticket.pk}/"))
    wait_for_agent_messages(page, 1)
    page.wait_for_function("() => !window.__chat.state().typing")
    assert page.locator("#chat-files").is_enabled()

    ticket_services.ticket_close(ticket=ticket.pk, user=make_support_staff("closer"))
    page.locator("#chat-note", has_text="This ticket is closed").wait_for()

    assert page.locator("#chat-input").is_disabled()
    assert page.locator("#chat-send").is_disabled()
    assert page.locator("#chat-files").is_disabled(), "a closed ticket's chat still offers to attach files"
    page.context.close()
