"""A message written in Arabic or Hebrew reads right to left where it is shown (the customer's chat,
as sent and after a reload, and the staff conversation), and one in English left to right: each
message takes its direction from its own first strong letter."""

from __future__ import annotations

import pytest

from tests.browser.conftest import Stack, sign_in
from tests.browser.test_customer_chat import wait_for_agent_messages
from tests.browser.test_staff_inbox import sign_in_person
from tests.conftest import make_customer
from tests.staff.conftest import make_support_staff
from tickets import services as ticket_services

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True), pytest.mark.timeout(120)]

ARABIC = "أين طلبي A-1001؟ 👩‍👩‍👧"
HEBREW = "שלום, איפה ההזמנה שלי?"

DIRECTIONS = (
    """sel => [...document.querySelectorAll(sel)].map(e => [e.textContent.trim(), getComputedStyle(e).direction])"""
)


def direction_of(page, selector: str, text: str) -> str:  # noqa: ANN001
    found = [d for t, d in page.evaluate(DIRECTIONS, selector) if text in t]
    assert found, (text, page.evaluate(DIRECTIONS, selector))
    return found[-1]


def test_a_right_to_left_message_reads_right_to_left_in_the_chat_and_on_the_staff_page(live: Stack, browser):  # noqa: ANN001
    customer = make_customer()
    ticket, _ = ticket_services.ticket_open(customer=customer, subject="RTL", body=HEBREW)
    page = sign_in(browser, live, customer)
    page.goto(live.url(f"/tickets/{ticket.pk}/"))
    wait_for_agent_messages(page, 1)
    page.fill("#chat-input", ARABIC)
    assert page.evaluate("getComputedStyle(document.getElementById('chat-input')).direction") == "rtl"
    page.press("#chat-input", "Enter")
    page.wait_for_selector("#chat-log li.msg.from-customer[data-seq]:not(.sending) >> nth=1")

    assert direction_of(page, "#chat-log .bubble", ARABIC) == "rtl"  # as sent
    assert direction_of(page, "#chat-log .bubble", HEBREW) == "rtl"  # rendered by the server
    assert direction_of(page, "#chat-log li.msg.from-agent .bubble", "") == "ltr"  # the agent's English
    page.reload()
    assert direction_of(page, "#chat-log .bubble", ARABIC) == "rtl"

    make_support_staff("maria", first_name="Maria", last_name="Lopez")
    staff = sign_in_person(browser, live, "maria")
    staff.goto(live.url(f"/staff/tickets/{ticket.pk}/"))
    assert direction_of(staff, "#timeline .msg .text", ARABIC) == "rtl"
    assert direction_of(staff, "#timeline .msg .text", HEBREW) == "rtl"
