"""A run that goes on after the customer's Confirm (or a staff decision) is the assistant at work:
the status line says it is typing while it writes the answer, as it does for a fresh turn. It said
"Open" then, while the answer streamed in under it (the run's going on was not on the customer's
timeline), and a page reloaded then said the same."""

from __future__ import annotations

import pytest

from tests.browser.test_refund_confirmation import ask_for_a_refund, confirm_stack  # noqa: F401

pytestmark = [
    pytest.mark.browser,
    pytest.mark.customer_confirms,
    pytest.mark.django_db(transaction=True),
    pytest.mark.timeout(240),
]

# The status line each time it changes, and whether an answer was streaming then.
RECORD = """() => {
  window.__status = [];
  const el = document.getElementById("chat-status-text");
  const streaming = () => window.__chat.state().streamStep !== null;
  new MutationObserver(() => window.__status.push({text: el.textContent, streaming: streaming()}))
    .observe(el, {subtree: true, childList: true, characterData: true});
}"""


def test_the_status_line_says_typing_while_the_answer_after_a_confirm_streams(confirm_stack, browser, payment_sandbox):  # noqa: ANN001, F811
    page, _, card = ask_for_a_refund(browser, confirm_stack, payment_sandbox, "T-1001")
    page.evaluate(RECORD)
    card.locator("button[data-answer=confirm]").click()
    page.wait_for_selector("#chat-log li.msg.from-agent:has-text('refunded $49.99')", timeout=30_000)

    streaming = [s["text"] for s in page.evaluate("window.__status") if s["streaming"]]
    assert streaming, "the answer after the Confirm must stream"
    assert set(streaming) == {"Our assistant is typing…"}, streaming
    assert page.inner_text("#chat-status-text") == "Waiting for your reply"
    page.context.close()
