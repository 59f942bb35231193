"""Text without spaces (a pasted link, a tracking number, a key held down) breaks inside its box on
the staff pages, as it does in the customer's chat: the page never scrolls sideways for it."""

from __future__ import annotations

import pytest

from tests.browser.conftest import Stack
from tests.browser.test_staff_inbox import sign_in_person
from tests.conftest import make_customer
from tests.staff.conftest import make_support_staff
from tickets import services
from tickets.models import Customer

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True), pytest.mark.timeout(180)]

LONG = "https://tracking.example.test/parcel/" + "Q8x" * 130  # about 430 characters, no space

# The page's width against the window's, and every message box whose text runs out of it.
OVERFLOW = """() => ({
  page: document.documentElement.scrollWidth,
  window: window.innerWidth,
  boxes: [...document.querySelectorAll('#timeline .msg, #timeline .msg .text, table.inbox td')]
    .filter(e => e.scrollWidth > e.clientWidth + 1).map(e => e.className || e.tagName),
  past: [...document.querySelectorAll('body *')].filter(e => e.getBoundingClientRect().right > innerWidth + 1)
    .map(e => e.tagName + '.' + e.className).slice(0, 5),
})"""


@pytest.mark.parametrize("width", [1280, 390])
def test_a_word_without_spaces_stays_inside_the_staff_pages(live: Stack, browser, width: int):  # noqa: ANN001
    customer = make_customer()
    Customer.objects.filter(pk=customer.pk).update(name="N" * 120)
    ticket, _ = services.ticket_open(customer=customer, subject="S" * 150, body=f"My parcel: {LONG}")
    make_support_staff("maria.lopez-" + "x" * 60, first_name="Maria", last_name="Lopez")  # a long username too
    page = sign_in_person(browser, live, "maria.lopez-" + "x" * 60)
    page.set_viewport_size({"width": width, "height": 900})

    page.goto(live.url(f"/staff/tickets/{ticket.pk}/"))
    page.wait_for_selector("#timeline li.msg.from-customer")
    shown = page.evaluate(OVERFLOW)
    assert shown["page"] <= shown["window"], shown
    assert shown["boxes"] == [], shown
    assert LONG in page.inner_text("#timeline")  # broken across lines, not cut

    page.goto(live.url("/staff/?view=all"))
    page.wait_for_selector("table.inbox")
    shown = page.evaluate(OVERFLOW)
    assert shown["boxes"] == [], shown
    assert shown["page"] <= shown["window"] or width < 1024, shown  # on a phone the table may scroll
