"""The customer confirms before money moves, in a real browser with a real worker and the payment
sandbox: a refund is paid after Confirm and only then, once, even when Confirm is double-clicked;
Cancel and an expired question pay nothing."""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import timedelta

import pytest
from django.utils import timezone

from agents.confirmation import confirmations_expire_due
from agents.models import CallStatus, Refund, ToolCall
from tests.browser.conftest import PASSWORD, SCREENSHOTS, Stack, running_stack, sign_in
from tests.browser.test_chat_after_signing_in_again_elsewhere import sign_out_and_in_again_in_another_tab
from tests.conftest import make_customer, make_order

pytestmark = [
    pytest.mark.browser,
    pytest.mark.customer_confirms,
    pytest.mark.django_db(transaction=True),
    pytest.mark.timeout(240),
]


@pytest.fixture(scope="module")
def confirm_stack(
    _orm_beside_playwright, django_db_setup, payment_sandbox_process, tmp_path_factory
) -> Iterator[Stack]:  # noqa: ANN001
    """daphne + one worker that asks customers to confirm refunds, both reaching the payment sandbox."""
    env = {"STRIPE_API_BASE": payment_sandbox_process.base_url, "REFUND_CUSTOMER_CONFIRMATION": "1"}
    with running_stack(tmp_path_factory.mktemp("confirm-stack"), token_delay_ms=5, **env) as started:
        yield started


def ask_for_a_refund(browser, stack: Stack, sandbox, number: str):  # noqa: ANN001, ANN201
    customer = make_customer()
    order = make_order(customer, total_cents=4999, number=number)
    sandbox.seed_payment(order.payment_reference, order.total_cents, order.currency)
    page = sign_in(browser, stack, customer)
    page.click("text=New ticket")
    page.fill("#id_body", f"Please refund order {number}")
    page.click("form.new-ticket button[type=submit]")
    page.wait_for_url(re.compile(r"/tickets/\d+/$"))
    card = page.locator("#chat-log li.confirm")
    card.wait_for(timeout=30_000)
    assert card.locator(".confirm-text").inner_text() == f"Refund $49.99 to the card used for order {number}?"
    return page, order, card


def paid(sandbox, order) -> list[dict]:  # noqa: ANN001
    return [r for r in sandbox.refunds() if r["payment_intent"] == order.payment_reference]


def test_confirm_pays_once_even_when_double_clicked(confirm_stack: Stack, browser, payment_sandbox):  # noqa: ANN001
    page, order, card = ask_for_a_refund(browser, confirm_stack, payment_sandbox, "C-1001")
    assert paid(payment_sandbox, order) == []  # asked, not paid
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / "customer-confirm-refund.png"))

    card.locator("button[data-answer=confirm]").dblclick()
    page.wait_for_selector("#chat-log li.msg.from-agent:has-text('refunded $49.99')", timeout=30_000)
    assert card.locator("button[data-answer=confirm]").is_hidden()

    assert [r["amount"] for r in paid(payment_sandbox, order)] == [4999]
    assert Refund.objects.get(order=order).provider_refund_id == paid(payment_sandbox, order)[0]["id"]
    assert page.locator("#chat-log li.msg.from-agent:has-text('refunded $49.99')").count() == 1


def test_cancel_pays_nothing(confirm_stack: Stack, browser, payment_sandbox):  # noqa: ANN001
    page, order, card = ask_for_a_refund(browser, confirm_stack, payment_sandbox, "C-1002")
    card.locator("button[data-answer=cancel]").click()
    page.wait_for_selector("#chat-log li.msg.from-agent:has-text('have not refunded anything')", timeout=30_000)
    assert paid(payment_sandbox, order) == [] and not Refund.objects.filter(order=order).exists()
    # A reload shows the question answered: no button to press again.
    page.reload()
    assert page.locator("#chat-log li.confirm button[data-answer=confirm]").is_hidden()


def test_an_expired_question_pays_nothing_and_the_customer_is_told(confirm_stack: Stack, browser, payment_sandbox):  # noqa: ANN001
    page, order, card = ask_for_a_refund(browser, confirm_stack, payment_sandbox, "C-1003")
    ToolCall.objects.filter(ticket__customer__orders=order, status=CallStatus.AWAITING_CONFIRMATION).update(
        confirmation_expires_at=timezone.now() - timedelta(seconds=1)
    )
    assert confirmations_expire_due() == 1  # what beat runs every AGENT_CONFIRMATION_EXPIRY_SECONDS
    page.wait_for_selector("#chat-log :has-text('did not confirm in time, so nothing was done')", timeout=30_000)
    assert card.locator("button[data-answer=confirm]").is_hidden()
    assert paid(payment_sandbox, order) == [] and not Refund.objects.filter(order=order).exists()


def test_a_confirm_recorded_whose_answer_was_lost_does_not_say_not_sent(confirm_stack: Stack, browser, payment_sandbox):  # noqa: ANN001
    """Confirm was recorded (the answer came over the socket: "You confirmed.", then the refund),
    but the answer to the click was lost: the card then said "Not sent. Check your connection and
    try again." about a refund that was paid."""
    page, order, card = ask_for_a_refund(browser, confirm_stack, payment_sandbox, "P-2001")

    def lose_the_answer(route):  # noqa: ANN001, ANN202
        route.fetch()  # recorded ...
        page.wait_for_timeout(2000)  # ... the answer reaches the page over the socket ...
        route.abort("connectionreset")  # ... and the answer to the click is lost

    page.route("**/confirmations/**", lose_the_answer)
    card.locator("button[data-answer=confirm]").click()
    page.wait_for_selector("#chat-log li.msg.from-agent:has-text('refunded $49.99')", timeout=30_000)
    page.wait_for_timeout(2500)  # past the lost answer

    note = card.locator(".confirm-note").inner_text()
    assert [r["amount"] for r in paid(payment_sandbox, order)] == [4999]
    assert "not sent" not in note.lower(), f"the card of a confirmed (and paid) refund says {note!r}"
    assert card.locator("button[data-answer=confirm]").is_hidden()
    page.context.close()


def test_confirm_in_one_tab_and_cancel_in_another_pays_once_and_both_tabs_say_what_stands(
    confirm_stack: Stack, browser, payment_sandbox  # noqa: ANN001
):  # fmt: skip
    page, order, card = ask_for_a_refund(browser, confirm_stack, payment_sandbox, "C-1004")
    other = page.context.new_page()
    other.goto(page.url)
    other_card = other.locator("#chat-log li.confirm")
    other_card.locator("button[data-answer=cancel]").wait_for()

    # The other tab hears nothing of the Confirm until it is back online: its Cancel is pressed on a
    # card that still offers it (live, the socket's update can hide the button before the click).
    other.evaluate("() => window.__chat.dropSocket(60000)")
    with page.expect_response("**/confirmations/**"):
        card.locator("button[data-answer=confirm]").click()
    with other.expect_response("**/confirmations/**"):
        other_card.locator("button[data-answer=cancel]").click()  # too late: the Confirm stands
    other.evaluate("() => window.dispatchEvent(new Event('online'))")
    for tab in (page, other):
        tab.wait_for_selector("#chat-log li.msg.from-agent:has-text('refunded $49.99')", timeout=30_000)

    assert [r["amount"] for r in paid(payment_sandbox, order)] == [4999]
    for shown in (card, other_card):
        assert shown.locator("button[data-answer]:visible").count() == 0
        assert "not sent" not in shown.locator(".confirm-note").inner_text().lower()
    assert "cancelled" not in other_card.locator(".confirm-note").inner_text().lower()
    page.context.close()


def test_confirm_pressed_after_the_question_expired_pays_nothing_and_says_so(
    confirm_stack: Stack, browser, payment_sandbox  # noqa: ANN001
):  # fmt: skip
    """The page was left open past the question's time, before the expiry sweep ran."""
    page, order, card = ask_for_a_refund(browser, confirm_stack, payment_sandbox, "C-1005")
    ToolCall.objects.filter(ticket__customer__orders=order, status=CallStatus.AWAITING_CONFIRMATION).update(
        confirmation_expires_at=timezone.now() - timedelta(seconds=1)
    )
    with page.expect_response("**/confirmations/**") as answer:
        card.locator("button[data-answer=confirm]").click()
    assert answer.value.status == 409
    note = card.locator(".confirm-note")
    page.wait_for_function("el => el.textContent.includes('expired')", arg=note.element_handle())
    assert card.locator("button[data-answer]:visible").count() == 0
    page.wait_for_timeout(1000)
    assert paid(payment_sandbox, order) == [] and not Refund.objects.filter(order=order).exists()
    page.context.close()


def test_a_confirm_whose_request_hangs_can_be_pressed_again_and_pays(confirm_stack: Stack, browser, payment_sandbox):  # noqa: ANN001
    """Confirm's request never got an answer (a half-open connection on a phone): the card said
    "Sending…" with its buttons off for as long as the page stayed open, and the refund waited
    until the question expired."""
    page, order, card = ask_for_a_refund(browser, confirm_stack, payment_sandbox, "P-2002")
    page.evaluate("() => window.__chat.sendTimeout(1500)")
    held = []
    page.route("**/confirmations/**", lambda route: held.append(route))  # never answered
    card.locator("button[data-answer=confirm]").click()
    note = card.locator(".confirm-note")
    note.filter(has_text="Not sent").wait_for(timeout=15_000)
    assert len(held) == 1 and paid(payment_sandbox, order) == []

    page.unroute("**/confirmations/**")
    card.locator("button[data-answer=confirm]").click()
    page.wait_for_selector("#chat-log li.msg.from-agent:has-text('refunded $49.99')", timeout=30_000)
    assert [r["amount"] for r in paid(payment_sandbox, order)] == [4999]


def test_a_confirm_pressed_after_another_customer_signed_in_says_so_and_pays_nothing_until_they_are_back(
    confirm_stack: Stack,
    browser,  # noqa: ANN001
    payment_sandbox,  # noqa: ANN001
):
    """A shared browser: another customer signed in, in another tab, while the question was on screen.
    Confirm was answered by a bare 404 page, and the card said "Not sent: the server answered 404.
    Please try again." at every press; it now says why, keeps its buttons, and offers to sign in."""
    page, order, card = ask_for_a_refund(browser, confirm_stack, payment_sandbox, "P-2002")
    owner = order.customer.user.username
    sign_out_and_in_again_in_another_tab(page, confirm_stack, make_customer().user.username)

    card.locator("button[data-answer=confirm]").click()
    note = card.locator(".confirm-note")
    note.get_by_role("link", name="Sign in again").wait_for()
    assert note.inner_text().startswith("This question is not open to the account signed in on this browser now")
    assert card.locator("button[data-answer=confirm]").is_enabled()
    assert paid(payment_sandbox, order) == []

    note.get_by_role("link", name="Sign in again").click()
    page.fill("#id_username", owner)
    page.fill("#id_password", PASSWORD)
    page.click("main form button[type=submit]")
    page.locator("#chat-log li.confirm button[data-answer=confirm]").click()
    page.wait_for_selector("#chat-log li.msg.from-agent:has-text('refunded $49.99')", timeout=30_000)
    assert [r["amount"] for r in paid(payment_sandbox, order)] == [4999]
