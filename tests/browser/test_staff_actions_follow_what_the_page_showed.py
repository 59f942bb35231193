"""The staff ticket page shows live who has the ticket and who is assigned. What is sent from it is
judged against what it showed: a hand-back, reply or assignment made after the page showed that a
colleague took the ticket (or was assigned it) is done, not refused with "... since this page was
opened" as if the page had not shown it. A change the page did not show is still refused."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

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


@dataclass(frozen=True)
class Watching:
    """Maria's staff page, open and live on a ticket the agent answered; Li is her colleague."""

    ticket: Ticket
    maria: Any
    li: Any
    person: Any  # Maria's browser page


def maria_watching(live: Stack, browser, *also: str) -> Watching:  # noqa: ANN001
    """Maria and Li (and the staff named in ``also``) work tickets; Maria has one open, live."""
    ticket, _ = services.ticket_open(customer=make_customer(), subject="Late kettle", body="Where is my kettle?")
    wait_until(agent_at_rest, timeout=30, what="the agent to answer", cluster=live.cluster)
    maria = make_support_staff("maria", first_name="Maria")
    li = make_support_staff("li", first_name="Li")
    for name in also:
        make_support_staff(name, first_name=name.title())
    person = sign_in_person(browser, live, "maria")
    person.goto(live.url(f"/staff/tickets/{ticket.pk}/"))
    person.wait_for_selector("#live-status:text-is('Live')")
    return Watching(ticket=ticket, maria=maria, li=li, person=person)


def li_takes_it_as_the_page_shows(watching: Watching) -> None:
    services.ticket_take_over(ticket=watching.ticket, user=watching.li)
    watching.person.wait_for_selector("#ticket-assignee:text-is('li')")


def li_assigns_it_to_herself_as_the_page_shows(watching: Watching) -> None:
    services.ticket_assign_to(ticket=watching.ticket, assignee=watching.li, user=watching.li)
    watching.person.wait_for_selector("#ticket-assignee:text-is('li')")


def flash_after(person, button: str) -> str:  # noqa: ANN001
    """What the page says after ``button`` is pressed and the action's answer is shown."""
    person.click(button)
    person.wait_for_selector(".flash li")
    return person.inner_text(".flash")


def test_hand_back_after_the_page_showed_a_colleague_take_the_ticket_is_done(live: Stack, browser):  # noqa: ANN001
    watching = maria_watching(live, browser)

    li_takes_it_as_the_page_shows(watching)
    watching.person.wait_for_selector("form[data-needs=hand_back]:not([hidden])")
    flash = flash_after(watching.person, "form[data-needs=hand_back] button")

    assert "Handed back" in flash, flash
    ticket = Ticket.objects.get(pk=watching.ticket.pk)
    assert ticket.status != TicketStatus.WITH_HUMAN and ticket.assignee_id is None


def test_reply_after_the_page_showed_a_colleague_take_the_ticket_is_sent(live: Stack, browser):  # noqa: ANN001
    watching = maria_watching(live, browser)

    li_takes_it_as_the_page_shows(watching)
    watching.person.fill("#reply-body", "Maria here: I have your courier on the line.")
    flash = flash_after(watching.person, "form.reply button[type=submit]")

    assert "Reply sent" in flash, flash
    staff_replies = Message.objects.filter(ticket=watching.ticket, author_kind=AuthorKind.STAFF)
    assert staff_replies.filter(body__contains="courier").count() == 1


@pytest.mark.parametrize(
    "colleague_change",
    [li_assigns_it_to_herself_as_the_page_shows, li_takes_it_as_the_page_shows],
    ids=["a-colleague-assigned", "a-colleague-took-the-ticket"],
)
def test_assignment_after_the_page_showed_the_change_is_done(live: Stack, browser, colleague_change):  # noqa: ANN001
    watching = maria_watching(live, browser)

    colleague_change(watching)
    watching.person.select_option("#assignee", "maria")
    flash = flash_after(watching.person, "form.assign button[type=submit]")

    assert "Assigned to maria" in flash, flash
    assert Ticket.objects.get(pk=watching.ticket.pk).assignee_id == watching.maria.pk


def test_reply_after_a_take_over_the_page_did_not_show_is_still_refused(live: Stack, browser):  # noqa: ANN001
    watching = maria_watching(live, browser)
    person = watching.person
    # From now on the page learns nothing new: its reads of what is new never arrive.
    person.route(re.compile(r"/staff/tickets/\d+/timeline\?"), lambda route: route.abort())

    with person.expect_event("requestfailed", lambda request: "/timeline?" in request.url):  # the page was rung
        services.ticket_take_over(ticket=watching.ticket, user=watching.li)
    assert person.inner_text("#ticket-assignee") == "nobody"
    person.fill("#reply-body", "Maria here: I have your courier on the line.")
    flash = flash_after(person, "form.reply button[type=submit]")

    assert "li has taken ticket" in flash and "since this page was opened" in flash, flash
    assert not Message.objects.filter(ticket=watching.ticket, author_kind=AuthorKind.STAFF).exists()
    assert not AgentRun.objects.filter(ticket=watching.ticket, status=RunStatus.RUNNING).exists()


def test_the_assignee_box_follows_a_colleagues_assignment_until_the_person_picks_someone(live: Stack, browser):  # noqa: ANN001
    """The box still named whom the page was opened with ("Nobody"), beside "assigned to li": pressing
    Assign took the ticket from li without anyone choosing that."""
    watching = maria_watching(live, browser)

    li_assigns_it_to_herself_as_the_page_shows(watching)
    assert watching.person.input_value("#assignee") == "li"
    flash_after(watching.person, "form.assign button[type=submit]")

    assert Ticket.objects.get(pk=watching.ticket.pk).assignee_id == watching.li.pk


def test_an_assignee_the_person_picked_stays_picked_through_live_updates(live: Stack, browser):  # noqa: ANN001
    watching = maria_watching(live, browser, "sam")
    watching.person.select_option("#assignee", "sam")

    li_assigns_it_to_herself_as_the_page_shows(watching)

    assert watching.person.input_value("#assignee") == "sam"


def test_the_page_stops_offering_assign_once_a_colleague_closed_the_ticket(live: Stack, browser):  # noqa: ANN001
    """A closed ticket is given to nobody (tests/staff/test_assign_a_closed_ticket.py): the page open on it
    when a colleague closes it hides the Assign form, as it hides Resolve and Close."""
    watching = maria_watching(live, browser)
    watching.person.wait_for_selector("form.assign:not([hidden])")

    services.ticket_close(ticket=watching.ticket, user=watching.li)

    watching.person.wait_for_selector("#ticket-status[data-status=closed]")
    watching.person.wait_for_selector("form.assign[hidden]", state="attached")
    assert not watching.person.is_visible("form.assign button[type=submit]")
    assert Ticket.objects.get(pk=watching.ticket.pk).assignee_id is None
