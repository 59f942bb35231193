"""The first words of an answer after a hand-back or a reopen show as they come.

The page shows no words of the agent while a person has the ticket: an answer in flight when they
took it is not posted. Tokens go straight to the socket, though, and the status change is read from
the ledger on a doorbell: the first words of the agent's next answer, after a person handed the
ticket back (or the customer reopened it by writing), could come while the page still said a person
had it, and were dropped (the posted message showed them later). Only the answers begun before the
person took the ticket are kept off the page: the server streams no others while a person has it."""

from __future__ import annotations

import pytest

from tests.browser.conftest import Stack, sign_in
from tests.browser.test_customer_chat import in_another_thread, wait_for_agent_messages
from tests.conftest import make_customer
from tests.staff.conftest import make_support_staff
from tickets import services as ticket_services

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True), pytest.mark.timeout(180)]

STATUS = "() => window.__chat.state().status"

# The next run's words come before the status change that gave the ticket back to the agent. Stream ids
# are run << 20 | index << 10 | attempt; this run is newer than any the page knows.
BACK = r"""back => {
  const chat = window.__chat, s0 = chat.state().lastSeq, seen = [];
  const receive = frame => {
    chat.receive(frame);
    const bubble = document.querySelector("#chat-live .msg.streaming .bubble");
    seen.push(bubble ? bubble.textContent : null);
  };
  const run = 2 ** 25, step = run * 2 ** 20 + 2 ** 10 + 1;
  receive({type: "token", step: step, offset: 0, text: "Happy "});
  receive({type: "token", step: step, offset: 6, text: "to help."});
  receive({type: "event", seq: s0 + 1, ...back});
  receive({type: "event", seq: s0 + 2, kind: "state", typing: true, run: run});
  receive({type: "event", seq: s0 + 3, kind: "message", author: "agent", author_name: "Support assistant",
           text: "Happy to help.", message_id: 987654, stream: step, at: new Date().toISOString()});
  return {seen, status: chat.state().status,
          agent: Array.from(document.querySelectorAll("#chat-log li.msg.from-agent .bubble"), b => b.textContent)};
}"""

HANDED_BACK = {
    "kind": "notice",
    "tone": "info",
    "status": "open",
    "text": "Our assistant is back to help you in this chat.",
}
REOPENED = {"kind": "state", "status": "open"}


@pytest.mark.parametrize(
    ("given", "back"),
    [("taken", HANDED_BACK), ("resolved", REOPENED)],
    ids=["handed-back", "reopened"],
)
def test_the_first_words_after_the_agent_has_the_ticket_again_show_before_the_status_says_so(
    live: Stack, browser, given: str, back: dict  # noqa: ANN001
):  # fmt: skip
    customer = make_customer()
    person = make_support_staff(f"hand-back-{given}", first_name="Maria")
    ticket, _ = ticket_services.ticket_open(customer=customer, subject="Back again", body="Hello there")
    page = sign_in(browser, live, customer)
    page.goto(live.url(f"/tickets/{ticket.pk}/"))
    wait_for_agent_messages(page, 1)
    page.wait_for_function("() => !window.__chat.state().typing")
    if given == "taken":
        in_another_thread(lambda: ticket_services.ticket_take_over(ticket=ticket.pk, user=person))
        page.wait_for_function(f"() => ({STATUS})() === 'with_human'")
    else:
        in_another_thread(lambda: ticket_services.ticket_resolve(ticket=ticket.pk, user=person))
        page.wait_for_function(f"() => ({STATUS})() === 'resolved'")

    result = page.evaluate(BACK, back)

    assert result["seen"][:2] == ["Happy ", "Happy to help."], result["seen"]  # as they came
    assert result["seen"][2:] == ["Happy to help.", "Happy to help.", None]  # then its message took over
    assert result["status"] == "open"
    assert result["agent"][1:] == ["Happy to help."]
    page.context.close()


# Words of the answer the agent was writing when the person took the ticket, arriving after the take-over
# (a reconnect's catch-up can read the buffer before the take-over clears it): never shown, whatever
# run they belong to, once a person has the ticket.
STALE = r"""() => {
  const chat = window.__chat, s0 = chat.state().lastSeq;
  const run = 2 ** 25, step = run * 2 ** 20 + 2 ** 10 + 1;
  chat.receive({type: "event", seq: s0 + 1, kind: "state", typing: true, run: run});
  chat.receive({type: "token", step: step, offset: 0, text: "Our refund "});
  chat.receive({type: "event", seq: s0 + 2, kind: "notice", tone: "info", status: "with_human", typing: false,
                text: "A person from our team has joined the conversation."});
  chat.receive({type: "token", step: step, offset: 0, text: "Our refund policy "});
  chat.receive({type: "token", step: step + 1, offset: 0, text: "Refunds "});  // its next attempt
  chat.receive({type: "token", step: step + 2 ** 10, offset: 0, text: "Refunds "});  // its next step
  return Array.from(document.querySelectorAll("#chat-live .msg .bubble"), b => b.textContent).filter(t => t);
}"""


def test_words_of_an_answer_begun_before_a_person_took_the_ticket_stay_off_the_page(live: Stack, browser):  # noqa: ANN001
    customer = make_customer()
    ticket, _ = ticket_services.ticket_open(customer=customer, subject="Taken", body="Hello there")
    page = sign_in(browser, live, customer)
    page.goto(live.url(f"/tickets/{ticket.pk}/"))
    wait_for_agent_messages(page, 1)
    page.wait_for_function("() => !window.__chat.state().typing")

    assert page.evaluate(STALE) == []
    page.context.close()


def test_a_page_opened_while_a_person_has_the_ticket_keeps_the_answer_they_stopped_off_it(live: Stack, browser):  # noqa: ANN001
    """The page knows the runs begun before it was opened from the server, not only from live events."""
    from agents.models import AgentRun

    customer = make_customer()
    person = make_support_staff("opened-later", first_name="Maria")
    ticket, _ = ticket_services.ticket_open(customer=customer, subject="Opened later", body="Hello there")
    page = sign_in(browser, live, customer)
    page.goto(live.url(f"/tickets/{ticket.pk}/"))
    wait_for_agent_messages(page, 1)
    page.wait_for_function("() => !window.__chat.state().typing")
    run = AgentRun.objects.filter(ticket=ticket).latest("pk").pk
    in_another_thread(lambda: ticket_services.ticket_take_over(ticket=ticket.pk, user=person))
    page.reload()
    page.wait_for_function("() => window.__chat.state().connected")

    shown = page.evaluate(
        """step => { window.__chat.receive({type: "token", step: step, offset: 0, text: "Late words"});
                     return document.querySelectorAll("#chat-live .msg.streaming").length; }""",
        (run << 20) | (2 << 10) | 1,
    )
    assert shown == 0
    page.context.close()
