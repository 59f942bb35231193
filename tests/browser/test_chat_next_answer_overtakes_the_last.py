"""The next answer's first words overtake the last answer's message and its run's end.

Tokens go straight to the socket; events are read from the ledger on a doorbell, so a customer
who wrote while the agent was answering can see the next run's first tokens before the
message that replaces the previous stream (and that run's "typing off"). Neither may take the
newer answer's stream off the page."""

from __future__ import annotations

import pytest

from tests.browser.conftest import Stack, sign_in
from tests.browser.test_customer_chat import wait_for_agent_messages
from tests.conftest import make_customer
from tickets import services as ticket_services

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True), pytest.mark.timeout(180)]

OVERTAKEN = r"""() => {
  const chat = window.__chat, s0 = chat.state().lastSeq, seen = [];
  const look = () => {
    const bubble = document.querySelector("#chat-live .msg.streaming .bubble");
    seen.push(bubble ? bubble.textContent : null);
  };
  // Stream ids are run << 20 | index << 10 | attempt: run R answers, then run R + 1 answers what came meanwhile.
  const run1 = 2 ** 25, run2 = run1 + 1;
  const step1 = run1 * 2 ** 20 + 2 ** 10 + 1, step2 = run2 * 2 ** 20 + 2 ** 10 + 1;
  chat.receive({type: "event", seq: s0 + 1, kind: "state", typing: true, run: run1});
  chat.receive({type: "token", step: step1, offset: 0, text: "Your order shipped."});
  chat.receive({type: "token", step: step2, offset: 0, text: "Thanks, "}); look();  // the next run overtakes
  chat.receive({type: "event", seq: s0 + 2, kind: "message", author: "agent", author_name: "Support assistant",
                text: "Your order shipped.", message_id: 987654, stream: step1, at: new Date().toISOString()}); look();
  chat.receive({type: "event", seq: s0 + 3, kind: "state", typing: false, run: run1}); look();  // run 1 ended
  chat.receive({type: "event", seq: s0 + 4, kind: "state", typing: true, run: run2}); look();
  chat.receive({type: "token", step: step2, offset: 8, text: "noted."}); look();
  const agent = document.querySelectorAll("#chat-log li.msg.from-agent .bubble");
  return {seen, agent: Array.from(agent, b => b.textContent)};
}"""


def test_the_next_answers_stream_survives_the_last_answers_message_and_run_end(live: Stack, browser):  # noqa: ANN001
    customer = make_customer()
    ticket, _ = ticket_services.ticket_open(customer=customer, subject="Overtaken", body="Hello there")
    page = sign_in(browser, live, customer)
    page.goto(live.url(f"/tickets/{ticket.pk}/"))
    wait_for_agent_messages(page, 1)
    page.wait_for_function("() => !window.__chat.state().typing")

    result = page.evaluate(OVERTAKEN)

    assert result["seen"] == ["Thanks, ", "Thanks, ", "Thanks, ", "Thanks, ", "Thanks, noted."]
    assert result["agent"][1:] == ["Your order shipped."]  # the last answer, once
    page.context.close()
