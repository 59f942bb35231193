"""The new-ticket form and the rating hold text to the server's limits as the server counts them:
characters, a line break as one. Their maxlength counted UTF-16 units, so emoji were cut at half
the limit, without a word (the chat box had the same fault)."""

from __future__ import annotations

import re

import pytest

from tests.browser.conftest import Stack, sign_in
from tests.conftest import make_customer
from tickets.models import AuthorKind, Message, Ticket

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True), pytest.mark.timeout(180)]


def test_a_new_ticket_of_emoji_goes_whole_and_one_past_the_limit_is_held_with_a_reason(live: Stack, browser):  # noqa: ANN001
    customer = make_customer()
    page = sign_in(browser, live, customer)
    page.goto(live.url("/tickets/new/"))
    page.focus("#id_subject")
    page.keyboard.insert_text("🎉" * 150)  # the subject takes 200 characters
    page.focus("#id_body")
    page.keyboard.insert_text("🙂" * 4001)  # the message takes 4,000
    assert page.evaluate("() => Array.from(document.getElementById('id_subject').value).length") == 150
    assert page.evaluate("() => Array.from(document.getElementById('id_body').value).length") == 4001
    assert page.inner_text("#id_body-limit") == "This can be at most 4000 characters (it has 4001)."

    page.click("form.new-ticket button[type=submit]")  # held: nothing sent, nothing cut
    assert page.url.endswith("/tickets/new/") and not Ticket.objects.filter(customer=customer).exists()
    page.press("#id_body", "Backspace")
    assert page.locator("#id_body-limit").is_hidden()
    page.click("form.new-ticket button[type=submit]")
    page.wait_for_url(re.compile(r"/tickets/\d+/$"))

    ticket = Ticket.objects.get(customer=customer)
    assert ticket.subject == "🎉" * 150
    assert Message.objects.get(ticket=ticket, author_kind=AuthorKind.CUSTOMER).body == "🙂" * 4000
    page.context.close()
