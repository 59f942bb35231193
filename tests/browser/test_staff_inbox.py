"""A person takes a conversation over from the agent, in two real browsers: the customer sees
the person's replies live under their name, the person sees the customer's answers live, and
after the hand-back the agent answers the next message."""

from __future__ import annotations

import re

import pytest
from django.contrib.sessions.models import Session

from tests.browser.conftest import PAGE_TIMEOUT_MS, SCREENSHOTS, Stack, sign_in
from tests.conftest import make_customer
from tests.staff.conftest import STAFF_PASSWORD, make_support_staff
from tests.workers import wait_until
from tickets import services
from tickets.models import AuthorKind, Message, Ticket, TicketStatus

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True), pytest.mark.timeout(240)]


def sign_in_person(browser, stack: Stack, username: str, *, timezone_id: str | None = None):  # noqa: ANN001, ANN201
    """A fresh browser context signed in as ``username`` (its clock in ``timezone_id``, else the host's)."""
    zone = {"timezone_id": timezone_id} if timezone_id else {}
    context = browser.new_context(viewport={"width": 1280, "height": 900}, **zone)
    context.set_default_timeout(PAGE_TIMEOUT_MS)
    context.add_init_script(
        "window.__csp = []; document.addEventListener('securitypolicyviolation', "
        "e => window.__csp.push(e.violatedDirective + ' ' + e.blockedURI));"
    )
    page = context.new_page()
    page.goto(stack.url("/accounts/login/"))
    page.fill("#id_username", username)
    page.fill("#id_password", STAFF_PASSWORD)
    page.click("main form button[type=submit]")
    page.wait_for_url(stack.url("/staff/"))
    return page


def agent_bubbles(page) -> int:  # noqa: ANN001
    return page.locator("#chat-log li.msg.from-agent[data-seq]").count()


def test_take_over_reply_live_and_hand_back_to_the_agent(live: Stack, browser):  # noqa: ANN001
    customer = make_customer()
    make_support_staff("maria", first_name="Maria", last_name="Lopez")
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)

    shopper = sign_in(browser, live, customer)
    shopper.click("text=New ticket")
    shopper.fill("#id_body", "Hello, I need help with a delivery.")
    shopper.click("form.new-ticket button[type=submit]")
    shopper.wait_for_url(re.compile(r"/tickets/\d+/$"))
    ticket = Ticket.objects.get(customer=customer)
    shopper.wait_for_function("() => document.querySelectorAll('#chat-log li.msg.from-agent[data-seq]').length >= 1")

    # The person finds the ticket in "All open" and opens the conversation.
    person = sign_in_person(browser, live, "maria")
    person.click(".staff-views >> text=All open")
    person.click(f"tr[data-ticket-id='{ticket.pk}'] a")
    person.wait_for_selector("#live-status:has-text('Live')")
    person.click("form[data-needs=take_over] button")
    person.wait_for_selector("#ticket-status[data-status=with_human]")
    shopper.wait_for_selector("#chat-log li.notice:has-text('has joined the conversation')")

    # The person replies; the customer sees it live, signed with the person's name.
    person.fill("#reply-body", "Hi, I'm Maria. Let me look into your delivery.")
    person.click("form.reply button[type=submit]")
    reply = shopper.locator("#chat-log li.msg.from-staff", has_text="Let me look into your delivery")
    reply.wait_for()
    assert "Maria Lopez" in reply.inner_text()

    # The customer answers; the person sees it live, without reloading, while typing a note.
    person.fill("#note-body", "Half-typed internal note")
    person.focus("#note-body")
    shopper.fill("#chat-input", "Thank you Maria, it was due on Monday.")
    shopper.press("#chat-input", "Enter")
    person.wait_for_selector("#timeline li.msg.from-customer:has-text('it was due on Monday')")
    assert person.input_value("#note-body") == "Half-typed internal note"
    assert person.evaluate("document.activeElement.id") == "note-body"
    person.screenshot(path=str(SCREENSHOTS / "staff-conversation.png"))
    # The agent said nothing while the person had the ticket.
    assert agent_bubbles(shopper) == 1

    # Hand back: the agent answers what the person left unanswered, then the next message.
    person.click("form[data-needs=hand_back] button")
    # The ticket is the agent's again; it may be answering already, so "Open" can be passed
    # through before the page shows it: what the page must show is that the person let go.
    person.wait_for_selector("#ticket-status:not([data-status=with_human])")
    assert person.is_hidden("form[data-needs=hand_back]")
    shopper.wait_for_selector("#chat-log li.notice:has-text('assistant is back')")
    shopper.wait_for_function("() => document.querySelectorAll('#chat-log li.msg.from-agent[data-seq]').length >= 2")
    shopper.fill("#chat-input", "One more question: what is your refund policy?")
    shopper.press("#chat-input", "Enter")
    shopper.wait_for_function("() => document.querySelectorAll('#chat-log li.msg.from-agent[data-seq]').length >= 3")
    person.wait_for_selector("#timeline li.msg.from-agent >> nth=2")
    shopper.screenshot(path=str(SCREENSHOTS / "customer-after-hand-back.png"))

    wait_until(
        lambda: Ticket.objects.get(pk=ticket.pk).status == TicketStatus.WAITING_ON_CUSTOMER,
        timeout=30, what="the agent's turn to end", cluster=live.cluster,
    )  # fmt: skip
    staff_messages = Message.objects.filter(ticket=ticket, author_kind=AuthorKind.STAFF)
    assert [m.body for m in staff_messages] == ["Hi, I'm Maria. Let me look into your delivery."]
    assert Message.objects.filter(ticket=ticket, author_kind=AuthorKind.AGENT).count() == 3
    assert person.evaluate("window.__csp") == [] and shopper.evaluate("window.__csp") == []


def test_a_reply_sent_after_the_session_ended_is_back_in_the_box_after_signing_in_and_sent_once(live: Stack, browser):  # noqa: ANN001
    """The reply form posts, the session had ended: the person was sent to sign in, and the POST (with
    their words) was dropped on the way; the ticket's page came back with an empty box."""
    customer = make_customer()
    make_support_staff("maria", first_name="Maria", last_name="Lopez")
    ticket, _ = services.ticket_open(customer=customer, subject="Late kettle", body="Where is my kettle?")
    services.ticket_hand_to_person(ticket=ticket, reason="asked for a person")
    person = sign_in_person(browser, live, "maria")
    person.goto(live.url(f"/staff/tickets/{ticket.pk}/"))
    words = "Hi, I'm Maria. Your kettle left our warehouse yesterday; it arrives on Friday."
    person.fill("#reply-body", words)
    Session.objects.all().delete()  # the session ended on the server meanwhile
    person.click("form.reply button[type=submit]")
    person.wait_for_url(re.compile(r"/accounts/login/"))
    assert not Message.objects.filter(ticket=ticket, author_kind=AuthorKind.STAFF).exists()

    person.fill("#id_username", "maria")
    person.fill("#id_password", STAFF_PASSWORD)
    person.click("main form button[type=submit]")
    person.wait_for_url(live.url(f"/staff/tickets/{ticket.pk}/"))
    assert person.input_value("#reply-body") == words
    assert "press Send reply" in person.inner_text("#reply-kept")

    person.click("form.reply button[type=submit]")
    person.wait_for_selector("#timeline li.msg.from-staff:has-text('left our warehouse yesterday')")
    assert [m.body for m in Message.objects.filter(ticket=ticket, author_kind=AuthorKind.STAFF)] == [words]
    assert person.input_value("#reply-body") == ""
    person.reload()  # sent: it is not put back again
    person.wait_for_selector("#live-status:has-text('Live')")
    assert person.input_value("#reply-body") == ""
    assert person.locator("#reply-kept").count() == 0
    assert person.evaluate("window.__csp") == []
    person.context.close()


def test_a_reply_is_held_to_the_servers_limit_in_characters_not_cut_at_half_of_it_in_emoji(live: Stack, browser):  # noqa: ANN001
    """The reply box's maxlength counted UTF-16 units: a reply of emoji was cut at half the server's
    limit, without a word. Now the box takes what the server takes, and past it the page says so and
    does not send; once shortened, it sends (the form is not left as if on its way)."""
    customer = make_customer()
    make_support_staff("maria", first_name="Maria", last_name="Lopez")
    ticket, _ = services.ticket_open(customer=customer, subject="Gift", body="Is it wrapped?")
    services.ticket_hand_to_person(ticket=ticket, reason="asked for a person")
    person = sign_in_person(browser, live, "maria")
    person.goto(live.url(f"/staff/tickets/{ticket.pk}/"))
    person.wait_for_selector("#live-status:has-text('Live')")
    limit = services.MESSAGE_MAX_CHARS
    gifts = "\U0001f381" * (limit // 2 + 10)  # past half the limit in emoji: more UTF-16 units than the limit

    person.fill("#reply-body", gifts + "\U0001f381" * limit)  # past the limit itself
    person.click("form.reply button[type=submit]")
    person.wait_for_selector("#reply-body-limit:not([hidden])")
    assert f"at most {limit} characters" in person.inner_text("#reply-body-limit")
    assert not Message.objects.filter(ticket=ticket, author_kind=AuthorKind.STAFF).exists()

    person.fill("#reply-body", gifts)
    assert person.evaluate("Array.from(document.querySelector('#reply-body').value).length") == len(gifts)
    person.click("form.reply button[type=submit]")
    wait_until(
        lambda: Message.objects.filter(ticket=ticket, author_kind=AuthorKind.STAFF).exists(),
        timeout=20,
        what="the reply",
    )
    assert [m.body for m in Message.objects.filter(ticket=ticket, author_kind=AuthorKind.STAFF)] == [gifts]
    person.context.close()
