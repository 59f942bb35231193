"""An answer cut off while streaming (the model went past the longest reply, a stream that broke)
is never posted: its words leave the page when the step fails, not when the next attempt begins
(after a backoff of seconds, or minutes when the model's server asks for them). A page reloaded
then shows none of them; the page that watched the stream shows the same."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from agents.models import ModelStep, StepStatus
from tests.browser.conftest import Stack, running_stack, sign_in
from tests.browser.test_customer_chat import LONG_POLICY, wait_for_agent_messages
from tests.conftest import make_customer
from tests.workers import wait_until
from tickets import services as ticket_services
from tickets.models import HelpArticle

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True), pytest.mark.timeout(180)]

# Each change of the live area: how many streaming bubbles, and the stream shown.
RECORD = """() => {
  window.__seen = [];
  const live = document.getElementById("chat-live");
  new MutationObserver(() => window.__seen.push({
    bubbles: live.querySelectorAll(".msg.streaming").length,
    step: window.__chat.state().streamStep,
  })).observe(live, {subtree: true, childList: true, characterData: true});
}"""


@pytest.fixture(scope="module")
def stack(_orm_beside_playwright, django_db_setup, tmp_path_factory) -> Iterator[Stack]:  # noqa: ANN001
    """A worker whose longest reply is 100 characters: the refund policy (411) is cut off at it."""
    env = {"AGENT_MAX_REPLY_CHARS": "100", "AGENT_MAX_CONSECUTIVE_FAILURES": "3"}
    with running_stack(tmp_path_factory.mktemp("cut-stack"), token_delay_ms=20, **env) as started:
        yield started


def test_the_words_of_an_answer_cut_off_leave_the_page_when_its_step_fails(live: Stack, browser):  # noqa: ANN001
    HelpArticle.objects.create(slug="refund-policy", title="Refund policy", body=LONG_POLICY)
    customer = make_customer()
    ticket, _ = ticket_services.ticket_open(customer=customer, subject="Refunds", body="Hello there")
    page = sign_in(browser, live, customer)
    page.goto(live.url(f"/tickets/{ticket.pk}/"))
    wait_for_agent_messages(page, 1)
    page.evaluate(RECORD)

    page.fill("#chat-input", "What is your refund policy?")
    page.press("#chat-input", "Enter")
    # The first attempt streams, is cut off, and is generated again after a backoff (1 to 2 s).
    page.wait_for_function(
        "() => new Set(window.__seen.map(s => s.step).filter(s => s !== null)).size >= 2", timeout=30_000
    )

    seen = page.evaluate("window.__seen")
    first = next(s["step"] for s in seen if s["step"] is not None)
    second = next(s["step"] for s in seen if s["step"] not in (None, first))
    begun = next(i for i, s in enumerate(seen) if s["step"] == first)
    again = next(i for i, s in enumerate(seen) if s["step"] == second)
    between = seen[begun:again]
    assert second > first
    # The cut-off words went before the next attempt began: for the backoff, the page showed none.
    assert any(s["bubbles"] == 0 for s in between), between[-3:]
    page.context.close()


def test_a_page_that_reconnects_after_an_answer_was_cut_off_shows_none_of_it(live: Stack, browser):  # noqa: ANN001
    HelpArticle.objects.create(slug="refund-policy", title="Refund policy", body=LONG_POLICY)
    customer = make_customer()
    ticket, _ = ticket_services.ticket_open(customer=customer, subject="Refunds", body="Hello there")
    page = sign_in(browser, live, customer)
    page.goto(live.url(f"/tickets/{ticket.pk}/"))
    wait_for_agent_messages(page, 1)

    page.fill("#chat-input", "What is your refund policy?")
    page.press("#chat-input", "Enter")
    page.wait_for_function("() => (window.__chat.state().streamText || '').length > 20")
    shown = page.evaluate("() => window.__chat.state().streamStep")
    page.evaluate("() => window.__chat.dropSocket(60000)")  # away while the step fails: its drop is missed
    wait_until(
        lambda: ModelStep.objects.filter(run__ticket=ticket, status=StepStatus.FAILED).exists(),
        timeout=30, what="the cut-off step to fail", interval=0.02,
    )  # fmt: skip
    page.evaluate("() => window.dispatchEvent(new Event('online'))")  # back now, in the backoff
    page.wait_for_function("() => window.__chat.state().connected")

    after = page.evaluate("() => window.__chat.state()")
    # A page reloaded now shows none of the cut-off answer; the reconnected one shows the same.
    assert after["streamStep"] != shown, after
    page.context.close()
