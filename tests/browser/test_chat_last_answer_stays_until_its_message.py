"""The last answer's words stay on the page until its message takes their place, when the next
answer's words come first.

Tokens go straight to the socket; events are read from the ledger on a doorbell. A customer who
wrote while the agent answered can get the next run's first words before the message of the
answer they were reading: the page took that answer's words off at the newer words and showed the
message a moment later, a flicker in which the answer vanished. A newer attempt at the same step
(a generation cut off and generated again) still replaces the words: they will never be posted."""

from __future__ import annotations

import pytest

from tests.browser.conftest import Stack, sign_in
from tests.browser.test_customer_chat import wait_for_agent_messages
from tests.conftest import make_customer
from tickets import services as ticket_services

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True), pytest.mark.timeout(180)]

# Stream ids are run << 20 | index << 10 | attempt: run R answers, then run R + 1 answers what came
# meanwhile. After each frame (what the customer sees until the next one): how often the last
# answer's text is on the page, and the text of the bubble streaming now.
FRAMES = r"""() => {
  const chat = window.__chat, s0 = chat.state().lastSeq, seen = [];
  const receive = frame => {
    chat.receive(frame);
    const bubbles = Array.from(document.querySelectorAll("#chat-scroll .msg.from-agent .bubble"), b => b.textContent);
    const streaming = document.querySelector("#chat-live .msg.streaming .bubble");
    seen.push({shipped: bubbles.filter(t => t === "Your order shipped.").length,
               streaming: streaming ? streaming.textContent : null});
  };
  const run1 = 2 ** 25, run2 = run1 + 1;
  const step1 = run1 * 2 ** 20 + 2 ** 10 + 1, step2 = run2 * 2 ** 20 + 2 ** 10 + 1;
  receive({type: "event", seq: s0 + 1, kind: "state", typing: true, run: run1});
  receive({type: "token", step: step1, offset: 0, text: "Your order "});
  receive({type: "token", step: step1, offset: 11, text: "shipped."});
  receive({type: "token", step: step2, offset: 0, text: "Thanks, "});  // the next run overtakes
  receive({type: "token", step: step1, offset: 11, text: "shipped."});  // late: already shown
  receive({type: "event", seq: s0 + 2, kind: "message", author: "agent", author_name: "Support assistant",
           text: "Your order shipped.", message_id: 987654, stream: step1, at: new Date().toISOString()});
  receive({type: "event", seq: s0 + 3, kind: "state", typing: false, run: run1});
  receive({type: "event", seq: s0 + 4, kind: "state", typing: true, run: run2});
  receive({type: "token", step: step2, offset: 8, text: "noted."});
  return {
    seen,
    log: Array.from(document.querySelectorAll("#chat-log li.msg.from-agent .bubble"), b => b.textContent),
    live: Array.from(document.querySelectorAll("#chat-live .msg .bubble"), b => b.textContent).filter(t => t),
  };
}"""


def test_the_last_answer_stays_on_the_page_until_its_message_when_the_next_answers_words_come_first(
    live: Stack, browser  # noqa: ANN001
):  # fmt: skip
    customer = make_customer()
    ticket, _ = ticket_services.ticket_open(customer=customer, subject="Overtaken", body="Hello there")
    page = sign_in(browser, live, customer)
    page.goto(live.url(f"/tickets/{ticket.pk}/"))
    wait_for_agent_messages(page, 1)
    page.wait_for_function("() => !window.__chat.state().typing")

    result = page.evaluate(FRAMES)

    seen = result["seen"]
    shown = next(i for i, s in enumerate(seen) if s["shipped"])
    # From its last word to its message, and after: the answer is on the page, once, at every moment.
    assert [s["shipped"] for s in seen[shown:]] == [1] * len(seen[shown:]), seen
    assert "Thanks, " in [s["streaming"] for s in seen]  # the next answer streamed meanwhile
    assert result["log"][1:] == ["Your order shipped."]  # the last answer, once, as a message
    assert result["live"] == ["Thanks, noted."]  # and nothing of it left in the live area
    page.context.close()


CUT_OFF = r"""() => {
  const chat = window.__chat, s0 = chat.state().lastSeq;
  const run = 2 ** 25, first = run * 2 ** 20 + 2 ** 10 + 1, again = first + 1;  // one step, two attempts
  chat.receive({type: "event", seq: s0 + 1, kind: "state", typing: true, run: run});
  chat.receive({type: "token", step: first, offset: 0, text: "Our refund pol"});
  chat.receive({type: "token", step: again, offset: 0, text: "Refunds take"});
  return Array.from(document.querySelectorAll("#chat-live .msg .bubble"), b => b.textContent).filter(t => t);
}"""


def test_a_step_generated_again_still_replaces_the_words_of_the_attempt_cut_off(live: Stack, browser):  # noqa: ANN001
    customer = make_customer()
    ticket, _ = ticket_services.ticket_open(customer=customer, subject="Again", body="Hello there")
    page = sign_in(browser, live, customer)
    page.goto(live.url(f"/tickets/{ticket.pk}/"))
    wait_for_agent_messages(page, 1)
    page.wait_for_function("() => !window.__chat.state().typing")

    assert page.evaluate(CUT_OFF) == ["Refunds take"]
    page.context.close()


KEPT_THEN_AWAY = r"""() => {
  const chat = window.__chat, s0 = chat.state().lastSeq;
  const run1 = 2 ** 25, step1 = run1 * 2 ** 20 + 2 ** 10 + 1, step2 = (run1 + 1) * 2 ** 20 + 2 ** 10 + 1;
  chat.receive({type: "event", seq: s0 + 1, kind: "state", typing: true, run: run1});
  chat.receive({type: "token", step: step1, offset: 0, text: "Never posted."});
  chat.receive({type: "token", step: step2, offset: 0, text: "Next "});
  return Array.from(document.querySelectorAll("#chat-live .msg .bubble"), b => b.textContent).filter(t => t);
}"""


def test_an_answer_kept_for_its_message_leaves_when_a_reconnect_brings_none(live: Stack, browser):  # noqa: ANN001
    """The socket dropped before the kept answer's message came, and the catch-up brought none: a
    page opened now would not show it, so the page that kept it does not either."""
    customer = make_customer()
    ticket, _ = ticket_services.ticket_open(customer=customer, subject="Kept", body="Hello there")
    page = sign_in(browser, live, customer)
    page.goto(live.url(f"/tickets/{ticket.pk}/"))
    wait_for_agent_messages(page, 1)
    page.wait_for_function("() => !window.__chat.state().typing")
    assert page.evaluate(KEPT_THEN_AWAY) == ["Never posted.", "Next "]

    page.evaluate("() => window.__chat.dropSocket(0)")
    page.wait_for_function("() => window.__chat.state().reconnects >= 1 && window.__chat.state().connected")
    assert "Never posted." not in page.inner_text("#chat-scroll")
    page.context.close()
