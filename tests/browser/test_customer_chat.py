"""The customer's web chat in a real browser, against daphne and a real Celery worker.

The worker's offline model streams its answer at 40 ms a token, so a test can
watch the answer grow and cut the connection in the middle of it.
"""

from __future__ import annotations

import re
import threading

import pytest
from django.db import connection

from agents.models import AgentRun, RunStatus
from tests.browser.conftest import SCREENSHOTS, Stack, sign_in
from tests.conftest import make_customer, make_order
from tests.staff.conftest import make_support_staff
from tests.workers import wait_until
from tickets import services as ticket_services
from tickets.models import ActorKind, AuthorKind, HelpArticle, Message, Ticket, TicketStatus

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True), pytest.mark.timeout(180)]

# Records the streaming bubble's text each time it changes, with the time and the reconnect count.
RECORD_STREAM = """() => {
  window.__samples = [];
  const live = document.getElementById("chat-live");
  new MutationObserver(() => {
    const bubble = live.querySelector(".msg.streaming .bubble");
    if (bubble) window.__samples.push({
      text: bubble.textContent,
      at: performance.now(),
      reconnects: window.__chat.state().reconnects,
      status: document.getElementById("chat-status-text").textContent,
    });
  }).observe(live, {subtree: true, childList: true, characterData: true});
}"""

AGENT_MESSAGES = "document.querySelectorAll('#chat-log li.msg.from-agent[data-seq]').length"


def wait_for_agent_messages(page, count: int) -> None:  # noqa: ANN001
    page.wait_for_function(f"n => {AGENT_MESSAGES} >= n", arg=count, timeout=30_000)


def agent_replies(ticket: Ticket) -> list[str]:
    return list(
        Message.objects.filter(ticket=ticket, author_kind=AuthorKind.AGENT, is_public=True)
        .order_by("created_at", "id")
        .values_list("body", flat=True)
    )


def ticket_of(page) -> Ticket:  # noqa: ANN001
    return Ticket.objects.get(pk=int(re.search(r"/tickets/(\d+)/$", page.url)[1]))


def distinct(samples: list[dict]) -> list[dict]:
    out: list[dict] = []
    for sample in samples:
        if not out or sample["text"] != out[-1]["text"]:
            out.append(sample)
    return out


def test_a_customer_asks_about_an_order_and_sees_the_answer_stream_in(live: Stack, browser):  # noqa: ANN001
    customer = make_customer()
    order = make_order(customer)
    page = sign_in(browser, live, customer)
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)

    page.click("text=New ticket")
    page.fill("#id_subject", "Question about my order")
    page.fill("#id_body", "Hi, I have a question.")
    page.screenshot(path=str(SCREENSHOTS / "new-ticket.png"))
    page.click("form.new-ticket button[type=submit]")
    page.wait_for_url(re.compile(r"/tickets/\d+/$"))
    ticket = ticket_of(page)
    wait_for_agent_messages(page, 1)

    page.evaluate(RECORD_STREAM)
    question = f"Where is my order {order.number}?"
    page.fill("#chat-input", question)
    page.press("#chat-input", "Enter")
    wait_for_agent_messages(page, 2)

    final = agent_replies(ticket)[-1]
    assert order.number in final
    samples = distinct(page.evaluate("window.__samples"))
    lengths = [len(s["text"]) for s in samples]
    assert len(lengths) >= 3, samples
    assert lengths == sorted(lengths) and len(set(lengths)) == len(lengths), samples
    assert all(final.startswith(s["text"]) for s in samples), samples
    assert samples[-1]["at"] - samples[0]["at"] >= 100, samples  # it grew over time, not in one go
    assert any(s["status"] == "Our assistant is typing…" for s in samples)
    assert page.locator("#chat-live .streaming").count() == 0
    assert page.locator("#chat-log li.msg.from-agent .bubble").last.text_content() == final
    assert page.inner_text("#chat-log").count(final) == 1
    assert page.inner_text("#chat-log").count(question) == 1  # the sent bubble became the message, no copy
    page.wait_for_function("() => document.getElementById('chat-status-text').textContent === 'Waiting for your reply'")
    assert not page.locator("#chat-typing").is_visible()  # the typing dots go once the answer is in
    page.screenshot(path=str(SCREENSHOTS / "chat.png"))
    assert page.evaluate("window.__csp") == []  # the chat, its script and its socket pass the policy

    page.goto(live.url("/tickets/"))
    assert page.locator(".ticket-row", has_text="Question about my order").locator(".badge").text_content() == (
        "Waiting for your reply"
    )
    page.screenshot(path=str(SCREENSHOTS / "tickets.png"))
    assert page.evaluate("window.__csp") == []
    page.context.close()


LONG_POLICY = (
    "You can ask for a refund on any paid, shipped or delivered order within thirty days of delivery, "
    "and we will always explain what happens next before anything is charged or returned to you. "
    "Refunds go back to the original payment method and usually arrive within five to ten business days, "
    "depending on how quickly your bank or card issuer processes the credit on their side. "
    "Partial refunds are possible for damaged items."
)


def test_an_answer_cut_by_a_dropped_connection_arrives_whole_and_exactly_once(live: Stack, browser):  # noqa: ANN001
    HelpArticle.objects.create(slug="refund-policy", title="Refund policy", body=LONG_POLICY)
    customer = make_customer()
    ticket, _ = ticket_services.ticket_open(customer=customer, subject="Refunds", body="Hello there")
    page = sign_in(browser, live, customer)
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.goto(live.url(f"/tickets/{ticket.pk}/"))
    wait_for_agent_messages(page, 1)

    page.evaluate(RECORD_STREAM)
    page.fill("#chat-input", "What is your refund policy?")
    page.press("#chat-input", "Enter")
    page.wait_for_function("() => (window.__chat.state().streamText || '').length > 30")
    page.evaluate("() => window.__chat.dropSocket(700)")  # tokens streamed meanwhile are lost to this page
    page.screenshot(path=str(SCREENSHOTS / "streaming.png"))
    wait_for_agent_messages(page, 2)

    final = agent_replies(ticket)[-1]
    assert final.startswith("From our help center, Refund policy:")
    samples = distinct(page.evaluate("window.__samples"))
    before = [s for s in samples if s["reconnects"] == 0]
    after = [s for s in samples if s["reconnects"] >= 1]
    assert before and after, "the connection must drop and come back while the answer is still streaming"
    # Everything the bubble ever showed was the answer's beginning: nothing doubled, nothing skipped.
    assert all(final.startswith(s["text"]) for s in samples), samples
    # The first text after the reconnect filled in what was missed during the outage, in one step.
    missed = len(after[0]["text"]) - len(before[-1]["text"])
    assert missed > 10, samples
    assert page.locator("#chat-live .streaming").count() == 0
    assert page.locator("#chat-log li.msg.from-agent").count() == 2
    assert page.inner_text("#chat-log").count(final) == 1
    assert agent_replies(ticket).count(final) == 1
    page.context.close()


def test_an_answer_streaming_when_a_person_takes_over_goes_from_the_page_and_is_never_posted(live: Stack, browser):  # noqa: ANN001
    HelpArticle.objects.create(slug="refund-policy", title="Refund policy", body=LONG_POLICY)
    customer = make_customer()
    person = make_support_staff("stream-taker", first_name="Maria")
    ticket, _ = ticket_services.ticket_open(customer=customer, subject="Refunds", body="Hello there")
    page = sign_in(browser, live, customer)
    page.goto(live.url(f"/tickets/{ticket.pk}/"))
    wait_for_agent_messages(page, 1)

    page.fill("#chat-input", "What is your refund policy?")
    page.press("#chat-input", "Enter")
    page.wait_for_function("() => (window.__chat.state().streamText || '').length > 30")
    ticket_services.ticket_take_over(ticket=ticket.pk, user=person)
    page.wait_for_function("() => document.querySelectorAll('#chat-live .streaming').length === 0", timeout=10_000)
    # The customer reloads while the agent's answer is still being written: the page opened now shows
    # none of it either (not from the stream's buffer, not from the pieces still coming).
    page.add_init_script(f"document.addEventListener('DOMContentLoaded', {RECORD_STREAM})")
    page.reload()
    wait_until(
        lambda: not AgentRun.objects.filter(ticket=ticket, status=RunStatus.RUNNING).exists(),
        timeout=30, what="the run to end",
    )  # fmt: skip
    page.wait_for_timeout(500)  # anything still on its way has arrived
    assert [s["text"] for s in page.evaluate("window.__samples")] == []  # no word of it came back
    assert page.locator("#chat-live .streaming").count() == 0
    assert len(agent_replies(ticket)) == 1  # the greeting only: the answer in flight was not posted
    assert "From our help center" not in page.inner_text("#chat-log")
    page.context.close()


def test_a_customer_cannot_reach_another_customers_ticket_by_url_or_websocket(live: Stack, browser):  # noqa: ANN001
    alice, bob = make_customer(), make_customer()
    bobs, _ = ticket_services.ticket_open(customer=bob, subject="Bob's secret", body="My door code is 4711")
    alices, _ = ticket_services.ticket_open(customer=alice, subject="Mine", body="Hello")
    page = sign_in(browser, live, alice)

    response = page.goto(live.url(f"/tickets/{bobs.pk}/"))
    assert response.status == 404
    assert "4711" not in page.content()

    listen = """url => new Promise(resolve => {
      const frames = [];
      const ws = new WebSocket(url);
      ws.onmessage = e => { frames.push(e.data); if (JSON.parse(e.data).type === "ready") ws.close(); };
      ws.onclose = e => resolve({code: e.code, frames});
      setTimeout(() => resolve({code: "timeout", frames}), 10000);
    })"""
    page.goto(live.url(f"/tickets/{alices.pk}/"))
    theirs = page.evaluate(listen, live.ws_url(f"/ws/tickets/{bobs.pk}/?after=0"))
    mine = page.evaluate(listen, live.ws_url(f"/ws/tickets/{alices.pk}/?after=0"))

    assert theirs == {"code": 4404, "frames": []}
    assert any("Hello" in frame for frame in mine["frames"])  # the same probe does reach her own ticket

    sent = page.evaluate(
        """url => fetch(url, {method: "POST", headers: {"Content-Type": "application/json",
             "X-CSRFToken": document.querySelector('meta[name="csrf-token"]').content},
             body: JSON.stringify({client_msg_id: "probe-1", body: "let me in"})}).then(r => r.status)""",
        live.url(f"/tickets/{bobs.pk}/messages"),
    )
    assert sent == 404
    assert not Message.objects.filter(body="let me in").exists()
    page.context.close()


def test_message_text_is_shown_as_text_and_never_run_as_html(live: Stack, browser):  # noqa: ANN001
    customer = make_customer()
    ticket, _ = ticket_services.ticket_open(customer=customer, subject="Hi", body="Hello there")
    page = sign_in(browser, live, customer)
    page.goto(live.url(f"/tickets/{ticket.pk}/"))
    wait_for_agent_messages(page, 1)
    attack = '<img src=x onerror="window.__pwned = 1"><b>bold</b>'

    page.fill("#chat-input", attack)
    page.press("#chat-input", "Enter")
    wait_until(
        lambda: Message.objects.filter(ticket=ticket, body=attack).exists(), timeout=15, what="the message to be saved"
    )
    page.wait_for_selector("#chat-log li.msg.from-customer[data-seq]:not(.pending) >> nth=1")

    for _ in range(2):  # live, then as the server renders it after a reload
        assert page.locator("#chat-log li.msg.from-customer", has_text="onerror").count() == 1
        assert page.locator("#chat-log img, #chat-log b").count() == 0
        assert page.locator("#chat-log li.msg.from-customer .bubble").last.text_content() == attack
        assert page.evaluate("() => window.__pwned") is None
        page.reload()
    page.context.close()


FRAME_SCRIPT = r"""() => {
  const chat = window.__chat, s0 = chat.state().lastSeq, seen = [];
  const look = () => {
    const bubble = document.querySelector("#chat-live .msg.streaming .bubble");
    seen.push(bubble ? bubble.textContent : null);
  };
  // Stream ids grow with the run (run << 20 | index << 10 | attempt): these are newer than any real one.
  const step1 = 2 ** 45 + 1, step2 = 2 ** 45 + 2;
  chat.receive({type: "event", seq: s0 + 1, kind: "state", typing: true, run: 2 ** 25});  // their run began
  chat.receive({type: "token", step: step1, offset: 0, text: "Your order "}); look();
  chat.receive({type: "token", step: step1, offset: 0, text: "Your order is "}); look();  // overlaps
  chat.receive({type: "token", step: step1, offset: 11, text: "is "}); look();  // already shown
  chat.receive({type: "token", step: step2, offset: 0, text: "Sorry, "}); look();  // generated again
  chat.receive({type: "token", step: step1, offset: 14, text: "late "}); look();  // the cut-off step
  chat.receive({type: "token", step: step2, offset: 7, text: "\u{1F600} ok"}); look();
  chat.receive({type: "token", step: step2, offset: 9, text: "ok."}); look();  // offsets count code points
  const reply = {type: "event", seq: s0 + 2, kind: "message", author: "agent", author_name: "Support assistant",
                 text: "Sorry, \u{1F600} ok.", message_id: 987654, at: new Date().toISOString()};
  chat.receive(reply); look();
  chat.receive({type: "token", step: step2, offset: 0, text: "Sorry, "}); look();  // after its message
  chat.receive(reply);  // replayed after a reconnect
  chat.receive({type: "event", seq: s0 + 3, kind: "state", typing: false});
  const agent = document.querySelectorAll("#chat-log li.msg.from-agent .bubble");
  return {seen, agent: Array.from(agent, b => b.textContent), typing: !document.getElementById("chat-typing").hidden};
}"""


def test_the_page_keeps_one_copy_of_each_piece_in_whatever_order_frames_come(live: Stack, browser):  # noqa: ANN001
    customer = make_customer()
    ticket, _ = ticket_services.ticket_open(customer=customer, subject="Frames", body="Hello there")
    page = sign_in(browser, live, customer)
    page.goto(live.url(f"/tickets/{ticket.pk}/"))
    wait_for_agent_messages(page, 1)
    page.wait_for_function("() => !window.__chat.state().typing")

    result = page.evaluate(FRAME_SCRIPT)

    assert result["seen"] == [
        "Your order ",
        "Your order is ",
        "Your order is ",
        "Sorry, ",
        "Sorry, ",
        "Sorry, \U0001f600 ok",
        "Sorry, \U0001f600 ok.",
        None,
        None,
    ]
    assert result["agent"][1:] == ["Sorry, \U0001f600 ok."]
    assert result["typing"] is False
    page.context.close()


def in_another_thread(work) -> None:  # noqa: ANN001
    """Run ledger writes off the test thread: Playwright's loop lives here, and Django refuses
    database work from a thread with a running event loop."""
    errors: list[BaseException] = []

    def run() -> None:
        try:
            work()
        except BaseException as exc:  # noqa: BLE001 - handed to the test thread
            errors.append(exc)
        finally:
            connection.close()

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(30)
    if errors:
        raise errors[0]


def test_a_review_and_the_refund_show_up_live_in_the_customers_words(live: Stack, browser):  # noqa: ANN001
    customer = make_customer()
    ticket, _ = ticket_services.ticket_open(customer=customer, subject="Refund for my kettle", body="Hello there")
    page = sign_in(browser, live, customer)
    page.goto(live.url(f"/tickets/{ticket.pk}/"))
    wait_for_agent_messages(page, 1)
    page.wait_for_function("() => !window.__chat.state().typing")
    status = page.locator("#chat-status-text")

    def review() -> None:
        ticket_services.ticket_transition(ticket=ticket.pk, to_status=TicketStatus.OPEN, actor_kind=ActorKind.CUSTOMER)
        ticket_services.ticket_transition(
            ticket=ticket.pk, to_status=TicketStatus.PENDING_APPROVAL, actor_kind=ActorKind.AGENT
        )
        ticket_services.event_append(
            ticket=ticket.pk,
            kind="approval_requested",
            actor_kind=ActorKind.AGENT,
            payload={"label": "Your refund request is under review by our team."},
            is_public=True,
        )

    in_another_thread(review)
    page.wait_for_selector("#chat-log .notice.tone-warn >> text=Your refund request is under review by our team.")
    assert status.text_content() == "Under review by our team"
    page.screenshot(path=str(SCREENSHOTS / "under-review.png"))

    def approve() -> None:
        ticket_services.event_append(
            ticket=ticket.pk,
            kind="approval_decided",
            actor_kind=ActorKind.STAFF,
            payload={"decision": "approved", "label": "Our team approved your request; finishing it now."},
            is_public=True,
        )
        ticket_services.ticket_transition(ticket=ticket.pk, to_status=TicketStatus.OPEN, actor_kind=ActorKind.AGENT)
        ticket_services.event_append(
            ticket=ticket.pk,
            kind="refund_succeeded",
            actor_kind=ActorKind.AGENT,
            payload={"label": "Refund of $49.99 issued"},
            is_public=True,
        )

    in_another_thread(approve)
    page.wait_for_selector("#chat-log .notice.tone-ok >> text=Refund of $49.99 issued")
    assert page.locator("#chat-log .notice.tone-ok", has_text="Our team approved your request").count() == 1
    assert status.text_content() == "Open"
    page.screenshot(path=str(SCREENSHOTS / "refund-confirmed.png"))
    page.context.close()
