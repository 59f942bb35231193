"""The staff ticket page shows live who has the ticket and who is assigned. What is sent from it is
judged against what it showed: a hand-back, reply or assignment made after the page showed that a
colleague took the ticket (or was assigned it) is done, not refused with "... since this page was
opened" as if the page had not shown it. A change the page did not show is still refused."""

from __future__ import annotations

import re

import pytest

from agents.models import AgentRun, RunStatus
from tests.browser.conftest import Stack, agent_at_rest
from tests.browser.test_staff_inbox import sign_in_person
from tests.conftest import make_customer
from tests.staff.conftest import make_support_staff
from tests.workers import wait_until
from tickets import services
from tickets.models import AuthorKind, Message, Ticket, TicketStatus

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True), pytest.mark.timeout(240)]


def ticket_the_agent_answered(live: Stack) -> Ticket:
    ticket, _ = services.ticket_open(customer=make_customer(), subject="Late kettle", body="Where is my kettle?")
    wait_until(agent_at_rest, timeout=30, what="the agent to answer", cluster=live.cluster)
    return ticket


def open_live(person, live: Stack, ticket: Ticket) -> None:  # noqa: ANN001
    person.goto(live.url(f"/staff/tickets/{ticket.pk}/"))
    person.wait_for_selector("#live-status:text-is('Live')")


def test_hand_back_after_the_page_showed_a_colleague_take_the_ticket_is_done(live: Stack, browser):  # noqa: ANN001
    ticket = ticket_the_agent_answered(live)
    make_support_staff("maria", first_name="Maria")
    li = make_support_staff("li", first_name="Li")
    person = sign_in_person(browser, live, "maria")
    open_live(person, live, ticket)

    services.ticket_take_over(ticket=ticket, user=li)
    person.wait_for_selector("#ticket-assignee:text-is('li')")
    person.wait_for_selector("form[data-needs=hand_back]:not([hidden])")
    person.click("form[data-needs=hand_back] button")

    person.wait_for_selector(".flash li")
    flash = person.inner_text(".flash")
    assert "Handed back" in flash, flash
    ticket.refresh_from_db()
    assert ticket.status != TicketStatus.WITH_HUMAN and ticket.assignee_id is None


def test_reply_after_the_page_showed_a_colleague_take_the_ticket_is_sent(live: Stack, browser):  # noqa: ANN001
    ticket = ticket_the_agent_answered(live)
    make_support_staff("maria", first_name="Maria")
    li = make_support_staff("li", first_name="Li")
    person = sign_in_person(browser, live, "maria")
    open_live(person, live, ticket)

    services.ticket_take_over(ticket=ticket, user=li)
    person.wait_for_selector("#ticket-assignee:text-is('li')")
    person.fill("#reply-body", "Maria here: I have your courier on the line.")
    person.click("form.reply button[type=submit]")

    person.wait_for_selector(".flash li")
    flash = person.inner_text(".flash")
    assert "Reply sent" in flash, flash
    assert Message.objects.filter(ticket=ticket, author_kind=AuthorKind.STAFF, body__contains="courier").count() == 1


def test_assignment_after_the_page_showed_a_colleague_assigned_is_done(live: Stack, browser):  # noqa: ANN001
    ticket = ticket_the_agent_answered(live)
    maria = make_support_staff("maria", first_name="Maria")
    li = make_support_staff("li", first_name="Li")
    person = sign_in_person(browser, live, "maria")
    open_live(person, live, ticket)

    services.ticket_assign_to(ticket=ticket, assignee=li, user=li)
    person.wait_for_selector("#ticket-assignee:text-is('li')")
    person.select_option("#assignee", "maria")
    person.click("form.assign button[type=submit]")

    person.wait_for_selector(".flash li")
    flash = person.inner_text(".flash")
    assert "Assigned to maria" in flash, flash
    ticket.refresh_from_db()
    assert ticket.assignee_id == maria.pk


def test_assignment_after_the_page_showed_a_colleague_take_the_ticket_is_done(live: Stack, browser):  # noqa: ANN001
    ticket = ticket_the_agent_answered(live)
    maria = make_support_staff("maria", first_name="Maria")
    li = make_support_staff("li", first_name="Li")
    person = sign_in_person(browser, live, "maria")
    open_live(person, live, ticket)

    services.ticket_take_over(ticket=ticket, user=li)
    person.wait_for_selector("#ticket-assignee:text-is('li')")
    person.select_option("#assignee", "maria")
    person.click("form.assign button[type=submit]")

    person.wait_for_selector(".flash li")
    flash = person.inner_text(".flash")
    assert "Assigned to maria" in flash, flash
    ticket.refresh_from_db()
    assert ticket.assignee_id == maria.pk


def test_reply_after_a_take_over_the_page_did_not_show_is_still_refused(live: Stack, browser):  # noqa: ANN001
    ticket = ticket_the_agent_answered(live)
    make_support_staff("maria", first_name="Maria")
    li = make_support_staff("li", first_name="Li")
    person = sign_in_person(browser, live, "maria")
    open_live(person, live, ticket)
    # From now on the page learns nothing new: its reads of what is new never arrive.
    person.route(re.compile(r"/staff/tickets/\d+/timeline\?"), lambda route: route.abort())

    with person.expect_event("requestfailed", lambda request: "/timeline?" in request.url):  # the page was rung
        services.ticket_take_over(ticket=ticket, user=li)
    assert person.inner_text("#ticket-assignee") == "nobody"
    person.fill("#reply-body", "Maria here: I have your courier on the line.")
    person.click("form.reply button[type=submit]")

    person.wait_for_selector(".flash li")
    flash = person.inner_text(".flash")
    assert "li has taken ticket" in flash and "since this page was opened" in flash, flash
    assert not Message.objects.filter(ticket=ticket, author_kind=AuthorKind.STAFF).exists()
    assert not AgentRun.objects.filter(ticket=ticket, status=RunStatus.RUNNING).exists()


def test_the_assignee_box_follows_a_colleagues_assignment_until_the_person_picks_someone(live: Stack, browser):  # noqa: ANN001
    """The box still named whom the page was opened with ("Nobody"), beside "assigned to li": pressing
    Assign took the ticket from li without anyone choosing that."""
    ticket = ticket_the_agent_answered(live)
    make_support_staff("maria", first_name="Maria")
    li = make_support_staff("li", first_name="Li")
    person = sign_in_person(browser, live, "maria")
    open_live(person, live, ticket)

    services.ticket_assign_to(ticket=ticket, assignee=li, user=li)
    person.wait_for_selector("#ticket-assignee:text-is('li')")
    assert person.input_value("#assignee") == "li"
    person.click("form.assign button[type=submit]")

    person.wait_for_selector(".flash li")
    ticket.refresh_from_db()
    assert ticket.assignee_id == li.pk


def test_an_assignee_the_person_picked_stays_picked_through_live_updates(live: Stack, browser):  # noqa: ANN001
    ticket = ticket_the_agent_answered(live)
    make_support_staff("maria", first_name="Maria")
    li = make_support_staff("li", first_name="Li")
    make_support_staff("sam", first_name="Sam")
    person = sign_in_person(browser, live, "maria")
    open_live(person, live, ticket)
    person.select_option("#assignee", "sam")

    services.ticket_assign_to(ticket=ticket, assignee=li, user=li)
    person.wait_for_selector("#ticket-assignee:text-is('li')")

    assert person.input_value("#assignee") == "sam"
