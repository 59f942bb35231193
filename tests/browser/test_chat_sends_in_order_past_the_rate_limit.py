# ruff: noqa: F401, F811, ANN001, ANN201
"""A customer who types faster than CUSTOMER_MESSAGE_RATE allows: the messages refused with 429 are
sent again when the wait is over, and stored (and answered) in the order they were typed, even when
the first one's request is the slower on the way (a phone's network)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.browser.conftest import (  # noqa: F401 - fixtures
    Stack,
    _fast_password_hashing,
    _lease_locks_held,
    _orm_beside_playwright,
    agent_at_rest,
    browser,
    running_stack,
)
from tests.browser.test_chat_send_refused_or_interrupted import forget_rate_windows, open_chat
from tests.workers import purge_broker, wait_until
from tickets.models import AuthorKind, Message

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True), pytest.mark.timeout(180)]

PERIOD_SECONDS = 12
# How long the first refused message's retry is held on the way (well under the page's send timeout).
SLOW_REQUEST_MS = 3000


@pytest.fixture(scope="module")
def rate_stack(_orm_beside_playwright, django_db_setup, tmp_path_factory) -> Iterator[Stack]:
    """daphne + one worker, with a customer allowed two messages in PERIOD_SECONDS."""
    with running_stack(
        tmp_path_factory.mktemp("rate-order"), token_delay_ms=0, CUSTOMER_MESSAGE_RATE=f"2/{PERIOD_SECONDS}s"
    ) as s:
        yield s


@pytest.fixture
def rate_live(rate_stack, transactional_db) -> Iterator[Stack]:
    yield rate_stack
    wait_until(agent_at_rest, timeout=60, what="the agent to finish its runs")
    purge_broker()
    wait_until(lambda: not _lease_locks_held(), timeout=30, what="the workers to let go of every lease")


def _typed(ticket) -> list[str]:
    return list(
        Message.objects.filter(ticket=ticket, author_kind=AuthorKind.CUSTOMER)
        .exclude(body="Hello there")
        .order_by("id")  # the order they were stored in
        .values_list("body", flat=True)
    )


def _wait(page, predicate, *, what: str, timeout_ms: int = 60_000) -> None:
    """Poll ``predicate`` while Playwright keeps serving the page's routes (a plain sleep would not)."""
    waited = 0
    while not predicate():
        assert waited < timeout_ms, f"timed out waiting for {what}"
        page.wait_for_timeout(100)
        waited += 100


def test_messages_refused_for_the_rate_are_stored_in_the_order_typed(rate_live: Stack, browser):
    forget_rate_windows()
    page, ticket = open_chat(rate_live, browser)
    held: list = []
    slow: dict[str, str | None] = {"text": None}

    def network(route) -> None:
        body = route.request.post_data or ""
        if slow["text"] is not None and slow["text"] in body:
            held.append(route)  # this message's request is the slow one on the way
            return
        route.continue_()

    page.route("**/messages", network)

    def send(text: str) -> None:
        page.fill("#chat-input", text)
        page.press("#chat-input", "Enter")

    def refused(text: str) -> bool:
        return page.locator("#chat-log li.msg.from-customer.failed", has_text=text).count() > 0

    def stored(text: str) -> bool:
        return page.locator("#chat-log li.msg.from-customer[data-seq]", has_text=text).count() > 0

    # Typed until the limit refuses one (the first two are within it, unless a window ended between).
    typed: list[str] = []
    first_refused = None
    for n in range(1, 8):
        text = f"question number {n}"
        send(text)
        typed.append(text)
        _wait(page, lambda text=text: refused(text) or stored(text), what=f"{text!r} to be stored or refused")
        if refused(text):
            first_refused = text
            break
    assert first_refused is not None, "the rate limit never refused a message"
    following = "and one more thing, typed right after"
    send(following)
    typed.append(following)
    _wait(page, lambda: refused(following) or stored(following), what="the next message to be refused or stored")

    # They wait (both, unless the window ended in between), saying so, and offer no Retry that could
    # not go before the wait is over.
    waiting = page.locator("#chat-log li.msg.from-customer.failed")
    assert waiting.count() >= 1, waiting.all_inner_texts()
    assert page.locator("#chat-log li.msg.from-customer.failed .msg-retry").count() == 0
    assert all("quickly" in words for words in waiting.all_inner_texts()), waiting.all_inner_texts()

    # When the wait is over, the first refused message's request is slow on the way.
    slow["text"] = first_refused
    _wait(page, lambda: held or stored(following), what="the refused messages to be sent again", timeout_ms=40_000)
    page.wait_for_timeout(SLOW_REQUEST_MS)
    slow["text"] = None
    for route in held:
        try:
            route.continue_()
        except Exception:  # noqa: BLE001 - a request the page gave up meanwhile (it sends it again)
            pass

    _wait(page, lambda: len(_typed(ticket)) >= len(typed), what="every message to be stored")
    assert _typed(ticket) == typed, "the customer's messages were stored in another order than they were typed"
    page.context.close()
