"""Sends that fail, in a real browser against daphne and a real worker: the customer sees
"Not sent. Retry", a retry (by hand or when the connection returns) stores the message once,
and a session that ended says so with a sign-in link that comes back to the ticket."""

from __future__ import annotations

import pytest
from django.contrib.sessions.models import Session

from tests.browser.conftest import PASSWORD, Stack, sign_in
from tests.browser.test_customer_chat import wait_for_agent_messages
from tests.conftest import make_customer
from tests.workers import wait_until
from tickets import services as ticket_services
from tickets.models import AuthorKind, Message, Ticket

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True), pytest.mark.timeout(180)]

NOT_SENT = "#chat-log li.msg.from-customer.failed .msg-error"
SENT = "#chat-log li.msg.from-customer[data-seq]:not(.failed):not(.sending)"


# Wraps the page's fetch to record the most sends in flight at one time.
COUNT_SENDS_AT_ONCE = """() => {
  const fetch = window.fetch;
  let now = 0;
  window.__mostSendsAtOnce = 0;
  window.fetch = function (url, init) {
    if (!String(url).endsWith("/messages")) return fetch.apply(this, arguments);
    now += 1;
    window.__mostSendsAtOnce = Math.max(window.__mostSendsAtOnce, now);
    return fetch.apply(this, arguments).finally(() => { now -= 1; });
  };
}"""


def open_chat(live: Stack, browser, subject: str):  # noqa: ANN001, ANN201
    customer = make_customer()
    ticket, _ = ticket_services.ticket_open(customer=customer, subject=subject, body="Hello there")
    page = sign_in(browser, live, customer)
    page.goto(live.url(f"/tickets/{ticket.pk}/"))
    wait_for_agent_messages(page, 1)
    page.wait_for_function("() => !window.__chat.state().typing")
    return page, ticket


def stored(ticket: Ticket, text: str) -> int:
    return Message.objects.filter(ticket=ticket, author_kind=AuthorKind.CUSTOMER, body=text).count()


def test_a_send_whose_answer_was_lost_is_retried_by_hand_and_stored_once(live: Stack, browser):  # noqa: ANN001
    page, ticket = open_chat(live, browser, "Lost answers")
    # The live socket stays away meanwhile: only the send's own answer can tell the page what happened.
    page.evaluate("() => window.__chat.dropSocket(60000)")
    posts: list[str] = []

    def lose_the_answer(route) -> None:  # noqa: ANN001
        posts.append(route.request.post_data_json["client_msg_id"])
        if len(posts) == 1:
            route.fetch()  # the server stores it; its answer never reaches the page
            route.fulfill(status=503, body="")
        else:
            route.abort("connectionreset")

    page.route("**/messages", lose_the_answer)
    text = "Did my parcel leave the warehouse?"
    page.fill("#chat-input", text)
    page.press("#chat-input", "Enter")

    failure = page.locator(NOT_SENT)
    failure.wait_for()
    assert failure.inner_text() == "Not sent. Retry"
    assert len(posts) == 3  # the send and two quick tries, then the customer is told
    assert stored(ticket, text) == 1  # the first one did arrive

    page.unroute("**/messages")
    with page.expect_response("**/messages") as answer:
        page.click("#chat-log .msg-retry")
    assert answer.value.status == 200  # the original, returned again: nothing new stored
    page.wait_for_selector("#chat-log li.msg.from-customer:not(.failed):not(.sending)[data-message-id]")

    assert page.locator(NOT_SENT).count() == 0
    assert set(posts) == {answer.value.request.post_data_json["client_msg_id"]}  # one client message ID throughout
    assert stored(ticket, text) == 1
    assert page.locator("#chat-log li.msg.from-customer", has_text=text).count() == 1
    # The connection returns: the message's event takes over the bubble rather than adding a copy.
    page.evaluate("() => window.dispatchEvent(new Event('online'))")
    page.wait_for_selector(SENT + f" >> text={text}")
    assert page.locator("#chat-log li.msg.from-customer", has_text=text).count() == 1
    page.context.close()


def test_sends_that_failed_offline_go_out_in_order_when_the_connection_returns(live: Stack, browser):  # noqa: ANN001
    page, ticket = open_chat(live, browser, "Offline")
    page.context.set_offline(True)
    texts = ["I am on a train.", "The tunnel is long.", "Still in it."]
    for text in texts:
        page.fill("#chat-input", text)
        page.press("#chat-input", "Enter")
    page.locator(NOT_SENT).nth(2).wait_for()
    assert page.locator(NOT_SENT).all_inner_texts() == ["Not sent. Retry"] * 3
    assert [stored(ticket, text) for text in texts] == [0, 0, 0]

    page.evaluate(COUNT_SENDS_AT_ONCE)
    page.context.set_offline(False)
    # The browser's own "online" and the socket's return each ask for a retry; so do these, at once.
    page.evaluate("() => { window.dispatchEvent(new Event('online')); window.dispatchEvent(new Event('online')); }")
    for text in texts:
        page.locator(SENT, has_text=text).wait_for(timeout=20_000)

    assert page.locator(NOT_SENT).count() == 0
    assert [stored(ticket, text) for text in texts] == [1, 1, 1]
    sent = Message.objects.filter(ticket=ticket, body__in=texts).order_by("created_at", "id")
    assert [m.body for m in sent] == texts  # in the order they were written
    assert [page.inner_text("#chat-log").count(text) for text in texts] == [1, 1, 1]
    assert page.evaluate("window.__mostSendsAtOnce") == 1  # one after another, never two racing
    page.context.close()


def test_a_send_that_failed_while_the_page_stayed_online_goes_out_before_the_next_message(live: Stack, browser):  # noqa: ANN001
    """The network failed the send (no "offline" from the browser, the socket stayed up): after the
    quick tries it read "Not sent. Retry". The customer then wrote again, and that went through: the
    connection is back, so the earlier message goes out first, once, not left unsent behind it."""
    page, ticket = open_chat(live, browser, "Flaky mobile data")
    page.route("**/messages", lambda route: route.abort("connectionreset"))
    first, second = "My parcel never came.", "Hello? Are you there?"
    page.fill("#chat-input", first)
    page.press("#chat-input", "Enter")
    page.locator(NOT_SENT).wait_for()
    assert stored(ticket, first) == 0

    page.unroute("**/messages")
    page.fill("#chat-input", second)
    page.press("#chat-input", "Enter")
    page.locator(SENT, has_text=second).wait_for()

    assert stored(ticket, first) == 1, page.inner_text("#chat-log")
    sent = Message.objects.filter(ticket=ticket, body__in=[first, second]).order_by("created_at", "id")
    assert [m.body for m in sent] == [first, second]  # in the order they were written
    page.locator(SENT, has_text=first).wait_for()
    assert page.locator(NOT_SENT).count() == 0
    assert [page.inner_text("#chat-log").count(text) for text in (first, second)] == [1, 1]
    page.context.close()


def test_messages_left_unsent_at_a_reload_are_sent_again_in_the_order_they_were_written(live: Stack, browser):  # noqa: ANN001
    """Messages kept over a reload were all sent again at once: one whose request failed on the
    first try (a server busy for a moment) was stored after the ones written after it."""
    page, ticket = open_chat(live, browser, "Reload with three unsent")
    page.route("**/messages", lambda route: route.abort("connectionreset"))
    texts = ["My parcel is late.", "It was due on Monday.", "Can you look?"]
    for text in texts:
        page.fill("#chat-input", text)
        page.press("#chat-input", "Enter")
    page.locator(NOT_SENT).nth(2).wait_for()
    page.unroute("**/messages")
    tries: list[str] = []

    def first_try_of_the_first_fails(route) -> None:  # noqa: ANN001
        tries.append(route.request.post_data_json["body"])
        if tries[-1] == texts[0] and tries.count(texts[0]) == 1:
            route.fulfill(status=503, body="")
        else:
            route.continue_()

    page.route("**/messages", first_try_of_the_first_fails)
    page.reload()
    for text in texts:
        page.locator(SENT, has_text=text).wait_for(timeout=30_000)

    sent = Message.objects.filter(ticket=ticket, body__in=texts).order_by("created_at", "id")
    assert [m.body for m in sent] == texts, tries  # in the order they were written
    assert [page.inner_text("#chat-log").count(text) for text in texts] == [1, 1, 1]
    page.unroute("**/messages")
    page.context.close()


def test_a_send_after_the_session_ended_says_so_and_signing_in_comes_back_to_the_ticket(live: Stack, browser):  # noqa: ANN001
    page, ticket = open_chat(live, browser, "Signed out")
    Session.objects.all().delete()  # the session ended on the server (expiry, a sign-out elsewhere)
    text = "Can I still change the address?"
    page.fill("#chat-input", text)
    page.press("#chat-input", "Enter")

    failure = page.locator(NOT_SENT)
    failure.wait_for()
    assert failure.inner_text().startswith("Not sent: you were signed out.")
    link = failure.get_by_role("link", name="Sign in again")
    assert link.get_attribute("href") == f"/accounts/login/?next=/tickets/{ticket.pk}/"
    assert stored(ticket, text) == 0
    page.evaluate("() => window.__chat.dropSocket(0)")  # the live socket, reconnecting, is told the same
    banner = page.locator("#chat-connection")
    banner.get_by_role("link", name="Sign in again").wait_for()
    assert banner.inner_text() == "You were signed out. Sign in again to see new replies."

    link.click()
    page.fill("#id_username", ticket.customer.user.username)
    page.fill("#id_password", PASSWORD)
    page.click("main form button[type=submit]")
    page.wait_for_url(live.url(f"/tickets/{ticket.pk}/"))

    assert page.input_value("#chat-input") == text  # what they wrote waits in the box
    page.press("#chat-input", "Enter")
    page.locator(SENT, has_text=text).wait_for()
    wait_until(lambda: stored(ticket, text) == 1, timeout=30, what="the message to be stored")
    page.context.close()


def test_a_message_of_emoji_is_held_to_the_servers_limit_in_characters(live: Stack, browser):  # noqa: ANN001
    """The box's maxlength counted UTF-16 units: 2,500 emoji (5,000 units) were cut to 2,000, though
    a message may have 4,000 characters. The page counts characters, as the server does, and says so
    past the limit without cutting what was written."""
    page, ticket = open_chat(live, browser, "Emoji")
    page.focus("#chat-input")
    page.keyboard.insert_text("🙂" * 2500)
    assert page.evaluate("() => Array.from(document.getElementById('chat-input').value).length") == 2500
    page.press("#chat-input", "Enter")
    page.locator(SENT).last.wait_for()
    wait_until(lambda: stored(ticket, "🙂" * 2500) == 1, timeout=30, what="the 2,500 emoji to be stored")

    page.focus("#chat-input")
    page.keyboard.insert_text("🙂" * 4001)
    note = page.locator("#chat-note")
    assert note.inner_text() == "A message can be at most 4000 characters (this one has 4001)."
    page.press("#chat-input", "Backspace")  # one emoji less: within the limit, the note goes
    page.wait_for_function("() => document.getElementById('chat-note').textContent === ''")
    page.press("#chat-input", "Enter")
    wait_until(lambda: stored(ticket, "🙂" * 4000) == 1, timeout=30, what="the 4,000 emoji to be stored")
    page.context.close()


def test_a_message_stored_whose_answer_was_lost_is_not_then_marked_not_sent(live: Stack, browser):  # noqa: ANN001
    """The send reached the server (stored; its event came over the socket and the bubble showed it
    sent), but the HTTP answer was lost and the network stayed down: the quick retries ran out and
    marked it "Not sent. Retry", and Retry did nothing. A customer then types it again."""
    page, ticket = open_chat(live, browser, "Answer lost")
    sends = {"n": 0}

    def lose_the_answer(route):  # noqa: ANN001, ANN202
        sends["n"] += 1
        if sends["n"] == 1:
            route.fetch()  # the server stores it ...
            page.wait_for_timeout(1500)  # ... its event reaches the page over the socket ...
            route.abort("connectionreset")  # ... and the answer is lost
        else:
            route.abort("internetdisconnected")

    page.route("**/messages", lose_the_answer)
    text = "Where is my parcel? It was due on Monday."
    page.fill("#chat-input", text)
    page.press("#chat-input", "Enter")
    bubble = page.locator("#chat-log li.msg.from-customer", has_text=text)
    bubble.and_(page.locator("[data-seq]")).wait_for()
    page.wait_for_timeout(3500)  # the quick retries (0.5 s, then 1 s) would have run out

    assert stored(ticket, text) == 1
    assert bubble.locator(".msg-error").count() == 0, bubble.locator(".msg-error").inner_text()
    assert "failed" not in (bubble.get_attribute("class") or "")
    page.context.close()


# Makes the page hidden or visible, as a phone's pocket does (a headless page is always visible).
SET_VISIBLE = """visible => {
  if (!window.__visibility) {
    Object.defineProperty(document, "visibilityState", { get: () => window.__visibility, configurable: true });
    Object.defineProperty(document, "hidden", { get: () => window.__visibility === "hidden", configurable: true });
  }
  window.__visibility = visible ? "visible" : "hidden";
  document.dispatchEvent(new Event("visibilitychange"));
}"""


def test_a_reply_that_came_while_the_page_was_hidden_and_the_socket_dropped_is_read_once_looked_at(
    live: Stack, browser  # noqa: ANN001
):  # fmt: skip
    """A reply came while the chat was in a pocket, and the phone dropped the socket meanwhile: back
    on screen, the page could not say it was read (no socket), and the socket's return did not
    either, so My tickets kept it unread."""
    from tickets.selectors import tickets_for_customer

    page, ticket = open_chat(live, browser, "In a pocket")
    page.evaluate(SET_VISIBLE, False)
    reply = "Your parcel is with the courier and arrives tomorrow."
    ticket_services.message_post(ticket=ticket, author_kind=AuthorKind.AGENT, body=reply)
    page.locator("#chat-log li.msg.from-agent[data-seq]", has_text=reply).wait_for()
    page.evaluate("() => window.__chat.dropSocket(2000)")
    page.wait_for_function("() => !window.__chat.state().connected")
    assert tickets_for_customer(user=ticket.customer.user).get(pk=ticket.pk).unread

    page.evaluate(SET_VISIBLE, True)
    page.wait_for_function("() => window.__chat.state().connected && window.__chat.state().reconnects >= 1")
    wait_until(
        lambda: not tickets_for_customer(user=ticket.customer.user).get(pk=ticket.pk).unread,
        timeout=30,
        what="the reply read on screen to be marked read",
    )
    page.context.close()
