"""A staff member's ticket page says "Live": what is on the ticket reaches it without a reload, also
what was written while its socket was still being set up, and after a read of what is new failed;
signed out on the server, it says so."""

from __future__ import annotations

import re

import pytest
from django.contrib.sessions.models import Session

from agents.models import AgentRun, RunStatus
from tests.browser.conftest import Stack, agent_at_rest, fail_the_first_read, sockets_that_can_go_silent
from tests.browser.test_staff_inbox import sign_in_person
from tests.conftest import make_customer
from tests.staff.conftest import make_support_staff
from tests.workers import wait_until
from tickets import services
from tickets.models import AuthorKind, Ticket

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True), pytest.mark.timeout(240)]


def ticket_with_a_person(live: Stack) -> Ticket:
    """A ticket handed to a person, the agent done with it (nothing else will ring the page)."""
    customer = make_customer()
    ticket, _ = services.ticket_open(customer=customer, subject="Late kettle", body="Where is my kettle?")
    services.ticket_hand_to_person(ticket=ticket, reason="asked for a person")
    wait_until(
        lambda: not AgentRun.objects.filter(ticket=ticket, status=RunStatus.RUNNING).exists(),
        timeout=30, what="the agent's run to end", cluster=live.cluster,
    )  # fmt: skip
    return ticket


def test_a_note_written_while_the_staff_page_connected_shows_without_anything_else_happening(live: Stack, browser):  # noqa: ANN001
    """The socket opens before the server has joined it to the ticket's group; the page read what was
    new then and said "Live". A note a colleague added between that read and the join rang nobody:
    it stayed off the page until something else happened on the ticket."""
    ticket = ticket_with_a_person(live)
    make_support_staff("maria", first_name="Maria")
    colleague = make_support_staff("li", first_name="Li")
    person = sign_in_person(browser, live, "maria")
    held = []
    # The page's socket is held before it reaches the server: the server's setup (its checks, the
    # group join) is slow, as on a busy host.
    person.route_web_socket(re.compile(r"/ws/staff/tickets/"), lambda ws: held.append(ws))
    person.goto(live.url(f"/staff/tickets/{ticket.pk}/"))
    person.wait_for_load_state("networkidle")
    assert len(held) == 1

    services.staff_note(ticket=ticket, user=colleague, body="Li: I called the courier.", client_msg_id="li-1")
    held[0].connect_to_server()

    person.wait_for_selector("#timeline li.msg.internal:has-text('I called the courier')")
    person.wait_for_selector("#live-status:text-is('Live')")


def test_a_customer_message_sent_while_the_socket_was_silent_shows_once_the_page_notices(live: Stack, browser):  # noqa: ANN001
    """A laptop that changed networks leaves a half-open socket: nothing more arrives on it, and the
    browser does not see it close for many minutes. The customer's new message stayed off the page,
    which still said "Live"."""
    ticket, _ = services.ticket_open(customer=make_customer(), subject="Late kettle", body="Where is my kettle?")
    # The agent has answered: nothing else happens on the ticket, so only a new socket can bring the message.
    wait_until(agent_at_rest, timeout=30, what="the agent to answer", cluster=live.cluster)
    make_support_staff("maria", first_name="Maria")
    person = sign_in_person(browser, live, "maria")
    links = sockets_that_can_go_silent(person, r"/ws/staff/tickets/")
    with person.expect_response(re.compile(r"/timeline\?")):  # the page's read at "ready" is over
        person.goto(live.url(f"/staff/tickets/{ticket.pk}/"))
    person.wait_for_selector("#live-status:text-is('Live')")
    person.evaluate("() => window.heartbeat && window.heartbeat.waits(1000, 1000)")
    links[0]["up"] = False  # from now on the socket carries nothing either way, and never closes

    services.message_post(ticket=ticket, author_kind=AuthorKind.CUSTOMER, body="It was due on Monday, still nothing.")

    person.wait_for_selector("#timeline li.msg.from-customer:has-text('It was due on Monday')")
    assert len(links) >= 2  # a socket of its own brought it
    assert person.locator("#timeline li.msg.from-customer", has_text="It was due on Monday").count() == 1
    person.wait_for_selector("#live-status:text-is('Live')")


def test_a_read_of_what_is_new_that_failed_is_made_again(live: Stack, browser):  # noqa: ANN001
    """The socket rang, the page's read of what was new got a 503 (a moment without a database
    connection): the page said "retrying" and never did; the note stayed off it."""
    ticket = ticket_with_a_person(live)
    make_support_staff("maria", first_name="Maria")
    colleague = make_support_staff("li", first_name="Li")
    person = sign_in_person(browser, live, "maria")
    person.goto(live.url(f"/staff/tickets/{ticket.pk}/"))
    person.wait_for_selector("#live-status:text-is('Live')")
    failed = fail_the_first_read(person, r"/staff/tickets/\d+/timeline\?")
    services.staff_note(ticket=ticket, user=colleague, body="Li: I called the courier.", client_msg_id="li-1")

    person.wait_for_selector("#timeline li.msg.internal:has-text('I called the courier')")
    assert len(failed) == 1
    person.wait_for_selector("#live-status:text-is('Live')")
    assert person.locator("#timeline li.msg.internal").count() == 1


def test_a_session_that_ended_on_the_server_is_said_not_retried(live: Stack, browser):  # noqa: ANN001
    """The session ended without a sign-out (expired, cleared): the socket learns it at its next check,
    up to 30 s later, and meanwhile rings for a colleague's note. The read of what was new led to the
    sign-in page; the page said "Could not load what is new; retrying…", which no retry could mend."""
    ticket = ticket_with_a_person(live)
    make_support_staff("maria", first_name="Maria")
    colleague = make_support_staff("li", first_name="Li")
    person = sign_in_person(browser, live, "maria")
    person.goto(live.url(f"/staff/tickets/{ticket.pk}/"))
    person.wait_for_selector("#live-status:text-is('Live')")
    Session.objects.all().delete()

    services.staff_note(ticket=ticket, user=colleague, body="Li: I called the courier.", client_msg_id="li-1")

    person.wait_for_selector("#live-status:text-is('You were signed out: sign in again to see what is new.')")


def test_a_socket_that_finds_the_session_ended_says_signed_out_not_refused(live: Stack, browser):  # noqa: ANN001
    """The socket's own check found the session gone (its account was rung: a name changed); its
    reconnect was refused and the page said "Not allowed: sign in again." as to someone without access.
    One read of what is new now tells which: the sign-in page it leads to says signed out."""
    ticket = ticket_with_a_person(live)
    maria = make_support_staff("maria", first_name="Maria")
    person = sign_in_person(browser, live, "maria")
    person.goto(live.url(f"/staff/tickets/{ticket.pk}/"))
    person.wait_for_selector("#live-status:text-is('Live')")
    Session.objects.all().delete()

    maria.last_name = "Rossi"
    maria.save()

    person.wait_for_selector("#live-status:text-is('You were signed out: sign in again to see what is new.')")
