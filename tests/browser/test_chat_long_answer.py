"""A very long answer: streamed in, cut by a dropped connection, and posted as more than one
message (a message holds at most MESSAGE_MAX_CHARS): the page shows it whole, once, in order."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from agents.models import ModelStep, StepStatus
from tests.browser.conftest import Stack, running_stack, sign_in
from tests.browser.test_customer_chat import RECORD_STREAM, agent_replies, distinct, wait_for_agent_messages
from tests.conftest import make_customer
from tickets import services as ticket_services
from tickets.models import HelpArticle

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True), pytest.mark.timeout(180)]

# One sentence of about 6,000 characters: the offline model quotes an article's first two.
WARRANTY = " ".join(f"clause {n} of the warranty covers parts and labour for the stated term" for n in range(90)) + "."


@pytest.fixture(scope="module")
def stack(_orm_beside_playwright, django_db_setup, tmp_path_factory) -> Iterator[Stack]:  # noqa: ANN001
    """A worker streaming at 2 ms a token: a long answer takes seconds, not minutes."""
    with running_stack(tmp_path_factory.mktemp("long-stack"), token_delay_ms=2) as started:
        yield started


def test_a_very_long_answer_cut_by_a_dropped_connection_shows_whole_and_once(live: Stack, browser):  # noqa: ANN001
    HelpArticle.objects.create(slug="warranty", title="Warranty", body=WARRANTY)
    customer = make_customer()
    ticket, _ = ticket_services.ticket_open(customer=customer, subject="Warranty", body="Hello there")
    page = sign_in(browser, live, customer)
    page.goto(live.url(f"/tickets/{ticket.pk}/"))
    wait_for_agent_messages(page, 1)
    page.wait_for_function("() => !window.__chat.state().typing")

    page.evaluate(RECORD_STREAM)
    page.fill("#chat-input", "What does the warranty cover?")
    page.press("#chat-input", "Enter")
    page.wait_for_function("() => (window.__chat.state().streamText || '').length > 1000")
    page.evaluate("() => window.__chat.dropSocket(300)")
    page.wait_for_function("() => !window.__chat.state().typing && window.__chat.state().connected", timeout=60_000)

    replies = agent_replies(ticket)
    assert len(replies) >= 3, [len(r) for r in replies]  # the greeting, and the answer in two messages or more
    # What was streamed: the answer whole (its messages are cut from it at spaces).
    whole = ModelStep.objects.filter(run__ticket=ticket, status=StepStatus.COMPLETED).latest("pk").response_text
    samples = distinct(page.evaluate("window.__samples"))
    assert len(samples) > 10 and max(len(s["text"]) for s in samples) > 1000
    assert all(whole.startswith(s["text"]) for s in samples), "a piece shown twice or out of place"
    assert any(s["reconnects"] >= 1 for s in samples), "the connection must drop while it streams"
    assert page.locator("#chat-log li.msg.from-agent .bubble").all_text_contents() == replies
    assert page.locator("#chat-live .msg:not(#chat-typing)").count() == 0
    page.context.close()
