"""The customer's chat as a customer on a bad network has it: two tabs of one ticket, a send whose
request hangs, a reload after a send whose answer was lost, a socket away while a person takes the
ticket and gives it back, a page left open across a take-over, a hand-back, a resolve and a reopen,
and markup in every kind of frame."""

from __future__ import annotations

import json

import pytest

from agents.models import AgentRun, RunStatus
from tests.browser.conftest import Stack, sign_in, sockets_that_can_go_silent
from tests.browser.test_chat_resilience import open_chat, stored
from tests.browser.test_customer_chat import (
    LONG_POLICY,
    agent_replies,
    in_another_thread,
    wait_for_agent_messages,
)
from tests.conftest import make_customer
from tests.staff.conftest import make_support_staff
from tests.workers import wait_until
from tickets import services as ticket_services
from tickets.models import AuthorKind, HelpArticle, Message, Ticket

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True), pytest.mark.timeout(180)]

SENT = "#chat-log li.msg.from-customer[data-seq]:not(.failed):not(.sending)"


def run_over(ticket: Ticket) -> None:
    wait_until(
        lambda: (
            not AgentRun.objects.filter(ticket=ticket, status=RunStatus.RUNNING).exists()
            and not Message.objects.filter(
                ticket=ticket, author_kind=AuthorKind.CUSTOMER, agent_handled_at=None
            ).exists()
        ),
        timeout=30,
        what="the agent to answer",
    )


def test_two_tabs_of_one_ticket_each_show_every_message_and_answer_once(live: Stack, browser):  # noqa: ANN001
    first, ticket = open_chat(live, browser, "Two tabs")
    second = first.context.new_page()
    second.goto(live.url(f"/tickets/{ticket.pk}/"))
    second.wait_for_function("() => window.__chat.state().connected")

    first.fill("#chat-input", "Sent from the first tab.")
    first.press("#chat-input", "Enter")
    wait_for_agent_messages(second, 2)
    second.fill("#chat-input", "And this from the second.")
    second.press("#chat-input", "Enter")
    wait_for_agent_messages(first, 3)
    run_over(ticket)
    for page in (first, second):
        page.wait_for_function("() => !window.__chat.state().typing && !window.__chat.state().streamStep")

    replies = agent_replies(ticket)
    for page in (first, second):
        shown = page.locator("#chat-log li.msg .bubble").all_text_contents()
        assert shown.count("Sent from the first tab.") == 1, shown
        assert shown.count("And this from the second.") == 1, shown
        assert [t for t in shown if t in replies] == replies, shown
        assert page.locator("#chat-live .msg:not(#chat-typing)").count() == 0
    assert stored(ticket, "Sent from the first tab.") == stored(ticket, "And this from the second.") == 1
    first.context.close()


def test_a_send_whose_request_hangs_is_sent_again_and_stored_once(live: Stack, browser):  # noqa: ANN001
    """A request that never gets an answer (a half-open connection on a train): the bubble stayed
    "sending" for good, and the message never reached the server while the page stayed open."""
    page, ticket = open_chat(live, browser, "Hanging send")
    page.evaluate("() => window.__chat.sendTimeout && window.__chat.sendTimeout(1500)")
    held = []
    page.route("**/messages", lambda route: held.append(route) if not held else route.continue_())
    text = "Is anyone there? My parcel is late."
    page.fill("#chat-input", text)
    page.press("#chat-input", "Enter")

    page.locator(SENT, has_text=text).wait_for(timeout=30_000)
    wait_until(lambda: stored(ticket, text) == 1, timeout=30, what="the message to be stored")
    page.wait_for_timeout(500)
    assert stored(ticket, text) == 1
    assert page.locator("#chat-log li.msg.from-customer", has_text=text).count() == 1
    page.unroute("**/messages")
    page.context.close()


def test_a_message_written_after_one_whose_request_hangs_does_not_overtake_it(live: Stack, browser):  # noqa: ANN001
    """The next message waited at most 15 s for the one before it, and a hung request is given up
    only after 20 s: the second was stored first, and the agent read the two reversed."""
    page, ticket = open_chat(live, browser, "Hanging first")
    held = []
    page.route("**/messages", lambda route: held.append(route) if not held else route.continue_())
    texts = ["My parcel is late.", "It was due on Monday."]
    for text in texts:
        page.fill("#chat-input", text)
        page.press("#chat-input", "Enter")
    for text in texts:
        page.locator(SENT, has_text=text).wait_for(timeout=60_000)

    sent = Message.objects.filter(ticket=ticket, body__in=texts).order_by("created_at", "id")
    assert [m.body for m in sent] == texts  # in the order they were written
    page.unroute("**/messages")
    page.context.close()


def test_a_socket_that_went_silent_without_closing_is_opened_again_and_the_reply_shown(live: Stack, browser):  # noqa: ANN001
    """A phone that changed networks leaves a half-open socket: nothing more arrives on it, and the
    browser does not see it close for many minutes. A reply that came meanwhile was not shown, and
    the page still said it was connected."""
    customer = make_customer()
    ticket, _ = ticket_services.ticket_open(customer=customer, subject="Half-open", body="Hello there")
    page = sign_in(browser, live, customer)
    links = sockets_that_can_go_silent(page, r"/ws/tickets/")
    page.goto(live.url(f"/tickets/{ticket.pk}/"))
    wait_for_agent_messages(page, 1)
    page.wait_for_function("() => window.__chat.state().connected && !window.__chat.state().typing")
    page.evaluate("() => window.__chat.heartbeat && window.__chat.heartbeat(1000, 1000)")
    links[0]["up"] = False  # from now on the socket carries nothing either way, and never closes

    reply = "Your parcel is with the courier and arrives tomorrow."
    ticket_services.message_post(ticket=ticket, author_kind=AuthorKind.AGENT, body=reply)
    page.locator("#chat-log li.msg.from-agent[data-seq]", has_text=reply).wait_for(timeout=30_000)

    assert len(links) >= 2  # a socket of its own brought it
    assert page.locator("#chat-log li.msg.from-agent", has_text=reply).count() == 1
    page.context.close()


# Each change of the conversation as the page loads: how many bubbles carry TEXT.
COUNT_COPIES = """document.addEventListener("DOMContentLoaded", () => {
  window.__copies = [];
  const log = document.getElementById("chat-log"), count = () => window.__copies.push(
    Array.from(log.querySelectorAll("li.msg .bubble")).filter(b => b.textContent === TEXT).length);
  count();
  new MutationObserver(count).observe(log, {subtree: true, childList: true, characterData: true});
});"""


def test_a_reload_after_a_send_reached_the_server_shows_the_message_once_at_every_moment(live: Stack, browser):  # noqa: ANN001
    """The send was stored, but its answer was lost and the page reloaded before its event came: the
    page showed the stored message and, until its send under the same ID was answered, a second
    bubble of it."""
    page, ticket = open_chat(live, browser, "Reload mid-send")
    page.evaluate("() => window.__chat.dropSocket(60000)")  # its event does not reach this page

    def store_and_lose(route) -> None:  # noqa: ANN001
        route.fetch()  # stored ...
        route.abort("connectionreset")  # ... and the answer is lost

    page.route("**/messages", store_and_lose)
    text = "I paid twice for one order."
    page.fill("#chat-input", text)
    page.press("#chat-input", "Enter")
    page.locator("#chat-log li.msg.from-customer.failed .msg-error").wait_for()  # the customer gives up: reload
    assert stored(ticket, text) == 1
    page.unroute("**/messages")

    page.add_init_script(COUNT_COPIES.replace("TEXT", json.dumps(text)))
    page.reload()
    page.wait_for_function("() => window.__chat.state().connected")
    page.wait_for_timeout(1000)
    assert set(page.evaluate("window.__copies")) == {1}, page.evaluate("window.__copies")
    assert stored(ticket, text) == 1
    page.reload()  # nothing of it is kept to be sent again
    page.wait_for_function("() => window.__chat.state().connected")
    assert page.evaluate("() => Object.keys(sessionStorage).filter(k => k.startsWith('chat-pending-'))") == []
    page.context.close()


def test_a_page_away_while_a_person_took_the_ticket_and_gave_it_back_shows_the_new_answer_once(
    live: Stack, browser  # noqa: ANN001
):  # fmt: skip
    HelpArticle.objects.create(slug="refund-policy", title="Refund policy", body=LONG_POLICY)
    page, ticket = open_chat(live, browser, "Away")
    person = make_support_staff("away-taker", first_name="Maria")
    page.fill("#chat-input", "What is your refund policy?")
    page.press("#chat-input", "Enter")
    page.wait_for_function("() => (window.__chat.state().streamText || '').length > 30")
    page.evaluate("() => window.__chat.dropSocket(60000)")
    in_another_thread(lambda: ticket_services.ticket_take_over(ticket=ticket.pk, user=person))
    wait_until(
        lambda: not AgentRun.objects.filter(ticket=ticket, status=RunStatus.RUNNING).exists(),
        timeout=30, what="the run to end",
    )  # fmt: skip
    in_another_thread(lambda: ticket_services.ticket_hand_back(ticket=ticket.pk, user=person))
    # The hand-back's doorbell reaches a worker a moment later (later on a loaded machine): the answer
    # it writes is what the page must show once it is back.
    wait_until(lambda: len(agent_replies(ticket)) >= 2, timeout=30, what="the answer after the hand-back")
    run_over(ticket)
    page.evaluate("() => window.dispatchEvent(new Event('online'))")
    page.wait_for_function("() => window.__chat.state().connected")
    page.wait_for_timeout(500)

    replies = agent_replies(ticket)
    assert len(replies) == 2, replies  # the greeting, and the answer after the hand-back
    shown = page.locator("#chat-log li.msg.from-agent .bubble").all_text_contents()
    assert shown == replies
    assert page.locator("#chat-live .msg:not(#chat-typing)").count() == 0
    assert page.inner_text("#chat-status-text") == "Waiting for your reply"
    page.context.close()


def test_a_page_left_open_follows_a_take_over_a_hand_back_a_resolve_and_a_reopen(live: Stack, browser):  # noqa: ANN001
    page, ticket = open_chat(live, browser, "Left open")
    person = make_support_staff("open-page-person", first_name="Maria")
    status = page.locator("#chat-status-text")
    rating = page.locator("#chat-rating")

    in_another_thread(lambda: ticket_services.ticket_take_over(ticket=ticket.pk, user=person))
    page.wait_for_function("() => window.__chat.state().status === 'with_human'")
    assert status.inner_text() == "With a person from our team"
    page.fill("#chat-input", "What are your opening hours?")
    page.press("#chat-input", "Enter")
    page.locator(SENT, has_text="What are your opening hours?").wait_for()

    in_another_thread(lambda: ticket_services.ticket_hand_back(ticket=ticket.pk, user=person))
    wait_for_agent_messages(page, 2)  # the agent answers what the person left unanswered
    run_over(ticket)
    page.wait_for_function("() => window.__chat.state().status === 'waiting_on_customer'")

    in_another_thread(lambda: ticket_services.ticket_resolve(ticket=ticket.pk, user=person))
    page.wait_for_function("() => window.__chat.state().status === 'resolved'")
    rating.wait_for(state="visible")
    page.fill("#chat-input", "Sorry, one more thing.")
    page.press("#chat-input", "Enter")  # reopens it: the agent answers
    wait_for_agent_messages(page, 3)
    run_over(ticket)
    page.wait_for_function("() => !window.__chat.state().typing")
    assert rating.is_hidden()

    replies = agent_replies(ticket)
    assert page.locator("#chat-log li.msg.from-agent .bubble").all_text_contents() == replies
    assert page.locator("#chat-live .msg:not(#chat-typing)").count() == 0
    page.reload()
    assert page.locator("#chat-log li.msg.from-agent .bubble").all_text_contents() == replies
    page.context.close()


MARKUP = '<img src=x onerror="window.__pwned = 1"><b>bold</b><script>window.__pwned = 2</script>'


def test_markup_in_every_kind_of_frame_is_shown_as_text(live: Stack, browser):  # noqa: ANN001
    page, _ = open_chat(live, browser, "Markup")
    page.evaluate(
        """markup => {
          const chat = window.__chat, s0 = chat.state().lastSeq, step = 2 ** 45 + 2 ** 10 + 1;
          const at = new Date().toISOString();
          chat.receive({type: "event", seq: s0 + 1, kind: "state", typing: true, run: 2 ** 25});
          chat.receive({type: "token", step: step, offset: 0, text: markup});
          chat.receive({type: "event", seq: s0 + 2, kind: "notice", tone: markup, text: markup, at: at});
          chat.receive({type: "event", seq: s0 + 3, kind: "confirm", call_id: 1, digest: markup, text: markup, at: at});
          chat.receive({type: "event", seq: s0 + 4, kind: "message", author: "staff", author_name: markup,
                        text: markup, message_id: 987654, at: at,
                        attachments: [{id: 1, name: markup, type: "application/pdf", size: 1, size_text: markup,
                                       url: "/x", image: false}]});
        }""",
        MARKUP,
    )
    page.wait_for_timeout(300)
    assert page.locator("#chat-scroll img, #chat-scroll b, #chat-scroll script").count() == 0
    assert page.evaluate("() => window.__pwned") is None
    assert page.locator("#chat-scroll").inner_text().count(MARKUP) >= 4
    page.context.close()
