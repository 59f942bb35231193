# ruff: noqa: F401, F811, E501, ANN001, ANN201
"""Sending from the customer's chat when the server says no, or the send fails and the page is reloaded."""

from __future__ import annotations

import json
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
    sign_in,
)
from tests.browser.test_customer_chat import wait_for_agent_messages
from tests.conftest import make_customer
from tests.workers import purge_broker, wait_until
from tickets import services as ticket_services
from tickets.models import AuthorKind, Message

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True), pytest.mark.timeout(120)]

NOT_SENT = "#chat-log li.msg.from-customer.failed .msg-error"


@pytest.fixture(scope="module")
def slow_rate_stack(_orm_beside_playwright, django_db_setup, tmp_path_factory) -> Iterator[Stack]:  # noqa: ANN001, F811
    """daphne + one worker, with a customer allowed two messages an hour (a fixed window that
    cannot reset during the test)."""
    with running_stack(tmp_path_factory.mktemp("rate"), token_delay_ms=0, CUSTOMER_MESSAGE_RATE="2/h") as s:
        yield s


@pytest.fixture
def rate_live(slow_rate_stack, transactional_db) -> Iterator[Stack]:  # noqa: ANN001
    """As tests.browser.conftest.live: the worker finishes what the test started before the tables go."""
    yield slow_rate_stack
    wait_until(agent_at_rest, timeout=30, what="the agent to finish its runs")
    purge_broker()
    wait_until(lambda: not _lease_locks_held(), timeout=30, what="the workers to let go of every lease")


def forget_rate_windows() -> None:
    """Rate-limit windows of earlier sessions (a fresh test database gives the same user ids again)."""
    import redis
    from django.conf import settings
    from django.core.cache import cache

    client = redis.Redis.from_url(settings.REDIS_URL)
    for key in client.scan_iter(match=cache.make_key("rl:") + "*"):
        client.delete(key)


def open_chat(stack: Stack, browser):  # noqa: ANN001, ANN201, F811
    customer = make_customer()
    ticket, _ = ticket_services.ticket_open(customer=customer, subject="Hello", body="Hello there")
    page = sign_in(browser, stack, customer)
    page.goto(stack.url(f"/tickets/{ticket.pk}/"))
    wait_for_agent_messages(page, 1)
    page.wait_for_function("() => !window.__chat.state().typing")
    return page, ticket


def stored(ticket, text: str) -> int:  # noqa: ANN001
    return Message.objects.filter(ticket=ticket, author_kind=AuthorKind.CUSTOMER, body=text).count()


def test_a_send_over_the_rate_limit_tells_the_customer_why_and_how_long(rate_live: Stack, browser):  # noqa: ANN001, F811
    """Over CUSTOMER_MESSAGE_RATE the page shows the server's sentence with the wait, and sends the
    message once the wait is over."""
    forget_rate_windows()
    page, ticket = open_chat(rate_live, browser)
    for text in ("first question", "second question"):
        page.fill("#chat-input", text)
        page.press("#chat-input", "Enter")
        page.locator("#chat-log li.msg.from-customer[data-seq]", has_text=text).wait_for()
    third = "third question, over the limit"
    page.fill("#chat-input", third)
    page.press("#chat-input", "Enter")
    failure = page.locator(NOT_SENT)
    failure.wait_for(timeout=15_000)
    assert stored(ticket, third) == 0
    words = failure.inner_text()
    assert "wait" in words.lower(), f"the customer is not told why, or for how long: {words!r}"
    page.context.close()


def test_a_message_that_failed_to_send_survives_a_reload(rate_live: Stack, browser):  # noqa: ANN001, F811
    """A send the network cut, then a reload: the message is sent again under its ID, stored once."""
    page, ticket = open_chat(rate_live, browser)
    page.route("**/messages", lambda route: route.abort("connectionreset"))
    text = "My parcel arrived damaged, what can I do?"
    page.fill("#chat-input", text)
    page.press("#chat-input", "Enter")
    page.locator(NOT_SENT).wait_for(timeout=15_000)
    page.unroute("**/messages")

    page.reload()
    page.wait_for_function("() => window.__chat.state().connected")
    page.wait_for_timeout(1000)
    page.locator("#chat-log li.msg.from-customer[data-seq]", has_text=text).wait_for()
    assert stored(ticket, text) == 1, "a message the customer wrote is lost on reload (or stored twice)"
    assert page.locator("#chat-log li.msg.from-customer", has_text=text).count() == 1
    page.context.close()


def test_a_send_the_server_could_not_store_says_why_and_keeps_the_message_to_retry(rate_live: Stack, browser):  # noqa: ANN001, F811
    """A 503 that says why (files the storage refused) is quoted once the quick tries are over, with
    Retry; the message waits on the page and goes once Retry is pressed after storage is back."""
    page, ticket = open_chat(rate_live, browser)
    words = "Your files could not be stored just now, so this message was not sent. Please send it again in a minute."
    answer = json.dumps({"error": words, "code": "files_not_stored"})
    page.route(
        "**/messages",
        lambda route: route.fulfill(
            status=503, content_type="application/json", headers={"Retry-After": "60"}, body=answer
        ),
    )
    text = "The box was crushed, photo to follow"
    page.fill("#chat-input", text)
    page.press("#chat-input", "Enter")

    failure = page.locator(NOT_SENT)
    failure.wait_for(timeout=15_000)
    assert words in failure.inner_text(), f"the customer is not told why: {failure.inner_text()!r}"
    assert stored(ticket, text) == 0
    page.unroute("**/messages")
    failure.locator(".msg-retry").click()

    page.locator("#chat-log li.msg.from-customer[data-seq]", has_text=text).wait_for()
    assert stored(ticket, text) == 1
    page.context.close()
