# ruff: noqa: F401, F811, E501, ANN001, ANN201
"""The refund question's Confirm / Cancel buttons say why when an answer cannot be taken: signed
out (with a sign-in link, the buttons kept), expired (after a reload too), or withdrawn because a
person took the conversation over (live, without pressing). Nothing is paid in any of them."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.contrib.sessions.models import Session
from django.utils import timezone

from agents.confirmation import confirmations_expire_due
from agents.models import CallStatus, ConfirmationDecision, Refund, ToolCall
from tests.browser.conftest import Stack, _fast_password_hashing, _orm_beside_playwright, browser  # noqa: F401 - fixtures
from tests.browser.test_refund_confirmation import ask_for_a_refund, confirm_stack, paid  # noqa: F401 - fixture

pytestmark = [
    pytest.mark.browser,
    pytest.mark.customer_confirms,
    pytest.mark.django_db(transaction=True),
    pytest.mark.timeout(180),
]


def test_confirm_after_the_session_ended_says_so_not_check_your_connection(
    confirm_stack: Stack,
    browser,
    payment_sandbox,  # noqa: ANN001, F811
):
    """The session ended while the question was on screen: Confirm says the customer was signed out
    and offers to sign in; nothing is paid."""
    page, order, card = ask_for_a_refund(browser, confirm_stack, payment_sandbox, "C-1901")
    Session.objects.all().delete()  # the session ended on the server (expiry, a sign-out elsewhere)

    card.locator("button[data-answer=confirm]").click()
    note = card.locator(".confirm-note")
    page.wait_for_function(
        "el => el.textContent && el.textContent !== 'Sending…'", arg=note.element_handle(), timeout=10_000
    )
    words = note.inner_text()
    assert paid(payment_sandbox, order) == []
    assert "signed out" in words.lower() or "sign in" in words.lower(), words
    page.context.close()


def test_an_expired_question_reloaded_does_not_claim_it_was_answered(
    confirm_stack: Stack,
    browser,
    payment_sandbox,  # noqa: ANN001, F811
):
    """An expired question says it expired, live and after a reload: never "Answered."."""
    page, order, card = ask_for_a_refund(browser, confirm_stack, payment_sandbox, "C-1902")
    ToolCall.objects.filter(ticket__customer__orders=order, status=CallStatus.AWAITING_CONFIRMATION).update(
        confirmation_expires_at=timezone.now() - timedelta(seconds=1)
    )
    assert confirmations_expire_due() == 1
    page.wait_for_selector("#chat-log :has-text('did not confirm in time, so nothing was done')", timeout=30_000)
    live_words = card.locator(".confirm-note").inner_text()
    assert "expired" in live_words, live_words

    page.reload()
    note = page.locator("#chat-log li.confirm .confirm-note")
    assert page.locator("#chat-log li.confirm button[data-answer=confirm]").is_hidden()
    assert (
        ToolCall.objects.get(ticket__customer__orders=order, confirmation_required=True).confirmation_decision
        == ConfirmationDecision.EXPIRED
    )
    assert "Answered" not in note.inner_text(), "the customer never answered: the question expired"
    assert not Refund.objects.filter(order=order).exists()
    page.context.close()


def test_a_question_withdrawn_by_a_take_over_loses_its_buttons_live(
    confirm_stack: Stack,
    browser,
    payment_sandbox,  # noqa: ANN001, F811
):
    """A person took the ticket over while the question waited: on the open page, without a reload,
    its buttons go and it says it was withdrawn; after a reload too. Nothing is paid."""
    from tests.staff.conftest import make_support_staff
    from tests.workers import wait_until
    from tickets import services as ticket_services

    page, order, card = ask_for_a_refund(browser, confirm_stack, payment_sandbox, "C-1903")
    call = ToolCall.objects.get(ticket__customer__orders=order, confirmation_required=True)
    ticket_services.ticket_take_over(ticket=call.ticket_id, user=make_support_staff("maria"))
    wait_until(
        lambda: ToolCall.objects.get(pk=call.pk).status == CallStatus.CANCELLED,
        timeout=30,
        what="the run to end and close the question",
    )
    withdrawn = "This question was withdrawn, so nothing was done."
    card.locator(f".confirm-note:has-text('{withdrawn}')").wait_for(timeout=15_000)
    assert card.locator("button[data-answer=confirm]").is_hidden()

    page.reload()
    card = page.locator("#chat-log li.confirm")
    assert card.locator("button[data-answer=confirm]").is_hidden()
    assert withdrawn in card.locator(".confirm-note").inner_text()
    assert paid(payment_sandbox, order) == []
    page.context.close()
