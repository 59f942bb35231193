# ruff: noqa: F401, F811, ANN001
"""The refund question's card says the customer's answer in one wording, however the page learnt it.

The card said "Confirmed." when the answer to the click set it, and "You confirmed." when the
socket's event did, or after a reload (and "Cancelled." against "You cancelled; nothing was
done."): the same answer in two wordings, depending on which arrived last. Now the server says the
words (the event's, ``agents.timeline_kinds``), and the click's answer carries them too.
"""

from __future__ import annotations

import pytest

from tests.browser.conftest import Stack, _fast_password_hashing, _orm_beside_playwright, browser
from tests.browser.test_refund_confirmation import ask_for_a_refund, confirm_stack, paid

pytestmark = [
    pytest.mark.browser,
    pytest.mark.customer_confirms,
    pytest.mark.django_db(transaction=True),
    pytest.mark.timeout(180),
]


@pytest.mark.parametrize(("answer", "number"), [("confirm", "C-2101"), ("cancel", "C-2102")])
def test_the_card_says_the_answer_as_a_reload_says_it(confirm_stack: Stack, browser, payment_sandbox, answer, number):
    page, order, card = ask_for_a_refund(browser, confirm_stack, payment_sandbox, number)
    # Only the answer to the click tells the card (the socket is away a while).
    page.evaluate("() => window.__chat.dropSocket(60000)")
    with page.expect_response("**/confirmations/**") as answered:
        card.locator(f"button[data-answer={answer}]").click()
    assert answered.value.status == 200
    note = card.locator(".confirm-note")
    page.wait_for_function("el => el.textContent && el.textContent !== 'Sending…'", arg=note.element_handle())
    said_on_the_click = note.inner_text()

    page.reload()
    said_after_a_reload = page.locator("#chat-log li.confirm .confirm-note").inner_text()

    assert said_on_the_click == said_after_a_reload, (
        f"the card said {said_on_the_click!r} on the click and {said_after_a_reload!r} after a reload"
    )
    if answer == "cancel":
        assert paid(payment_sandbox, order) == []
    page.context.close()
