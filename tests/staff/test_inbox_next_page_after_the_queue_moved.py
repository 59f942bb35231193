"""The inbox's pages while colleagues work the queue. "Next page" counted rows from the top of the view
as it was when the next page was read: a ticket on the page read before that left the view (a colleague
resolved it) or moved to its end (its last change was just now) shifted every later ticket up one place,
and the first ticket of the next page went onto the page already read. Following "Next page" never
showed it: walking the queue page by page, a person never saw a ticket that waited for them."""

from __future__ import annotations

import re

import pytest
from django.test import Client
from django.urls import reverse

from staff import views as staff_views
from tests.conftest import make_customer
from tests.staff.conftest import make_support_staff
from tickets import services
from tickets.models import Ticket

pytestmark = pytest.mark.django_db


def walk(person: Client, link: str, between=lambda page_number: None) -> list[int]:  # noqa: ANN001
    """Every ticket listed following "Next page" from ``link``; ``between(n)`` runs after page n is read."""
    listed, n = [], 0
    while link:
        page = person.get(link)
        assert page.status_code == 200
        html = page.content.decode()
        listed += [int(pk) for pk in re.findall(r'data-ticket-id="(\d+)"', html)]
        n += 1
        between(n)
        found = re.search(r'href="([^"]*)" rel="next"', html)
        link = found.group(1).replace("&amp;", "&") if found else ""
    return listed


@pytest.fixture
def five_waiting(monkeypatch) -> list[Ticket]:  # noqa: ANN001
    """Five tickets handed to a person, oldest first, two to a page."""
    monkeypatch.setattr(staff_views, "INBOX_PAGE_SIZE", 2)
    customer = make_customer()
    tickets = []
    for n in range(5):
        ticket, _ = services.ticket_open(customer=customer, subject=f"Kettle {n}", body="Help", client_ref=f"k{n}")
        services.ticket_hand_to_person(ticket=ticket, reason="asked for a person")
        tickets.append(ticket)
    return tickets


@pytest.fixture
def person() -> Client:
    client = Client()
    client.force_login(make_support_staff("maria", first_name="Maria"))
    return client


def test_the_next_page_starts_after_the_last_ticket_shown_when_a_colleague_resolved_one_above(person, five_waiting):  # noqa: ANN001
    colleague = make_support_staff("li", first_name="Li")
    first = five_waiting[0]

    def colleague_resolves_the_first(page_number: int) -> None:
        if page_number == 1:
            services.ticket_resolve(ticket=first.pk, user=colleague)

    listed = walk(person, reverse("staff:inbox") + "?view=needs_person", colleague_resolves_the_first)

    assert listed == [t.pk for t in five_waiting], "a ticket of the queue was on no page the person read"


def test_the_next_page_starts_after_the_last_ticket_shown_when_one_above_changed(person, five_waiting):  # noqa: ANN001
    first = five_waiting[0]

    def the_customer_writes_on_the_first(page_number: int) -> None:
        if page_number == 1:  # its last change is now: it goes to the end of "All open"
            services.message_post(ticket=first.pk, author_kind="customer", body="Hello? Anyone there?")

    listed = walk(person, reverse("staff:inbox") + "?view=open", the_customer_writes_on_the_first)

    assert sorted(set(listed)) == sorted(t.pk for t in five_waiting), f"listed {listed}"
    assert listed[:2] == [t.pk for t in five_waiting[:2]]


def test_previous_page_leads_back_to_the_tickets_before_and_the_pages_say_where_they_are(person, five_waiting):  # noqa: ANN001
    ids = [t.pk for t in five_waiting]
    link = reverse("staff:inbox") + "?view=needs_person&q=Kettle"
    pages = []
    while link:
        html = person.get(link).content.decode()
        pages.append(html)
        found = re.search(r'href="([^"]*)" rel="next"', html)
        link = found.group(1).replace("&amp;", "&") if found else ""
        if link:
            assert "q=Kettle" in link and "view=needs_person" in link
    assert ["1 to 2 of 5" in pages[0], "3 to 4 of 5" in pages[1], "5 to 5 of 5" in pages[2]] == [True] * 3
    back = re.search(r'href="([^"]*)" rel="prev"', pages[2]).group(1).replace("&amp;", "&")
    html = person.get(back).content.decode()
    assert [int(pk) for pk in re.findall(r'data-ticket-id="(\d+)"', html)] == ids[2:4]
    assert "3 to 4 of 5" in html
    back = re.search(r'href="([^"]*)" rel="prev"', html).group(1).replace("&amp;", "&")
    html = person.get(back).content.decode()
    assert [int(pk) for pk in re.findall(r'data-ticket-id="(\d+)"', html)] == ids[:2]
    assert 'rel="prev"' not in html


@pytest.mark.parametrize("view", ["needs_person", "mine", "open", "all"])
def test_every_view_lists_each_ticket_once_in_its_order_across_its_pages(person, five_waiting, view, monkeypatch):  # noqa: ANN001
    maria = person.get(reverse("staff:inbox")).context["user"]
    for ticket in five_waiting:
        services.ticket_take_over(ticket=ticket.pk, user=maria)
    monkeypatch.setattr(staff_views, "INBOX_PAGE_SIZE", 100)
    whole = [t.pk for t in person.get(reverse("staff:inbox"), {"view": view}).context["tickets"]]
    monkeypatch.setattr(staff_views, "INBOX_PAGE_SIZE", 2)

    assert sorted(whole) == sorted(t.pk for t in five_waiting)
    assert walk(person, reverse("staff:inbox") + f"?view={view}") == whole


def test_a_next_page_whose_tickets_all_left_the_view_shows_its_last_page(person, five_waiting):  # noqa: ANN001
    colleague = make_support_staff("li", first_name="Li")
    html = person.get(reverse("staff:inbox"), {"view": "needs_person"}).content.decode()
    next_page = re.search(r'href="([^"]*)" rel="next"', html).group(1).replace("&amp;", "&")
    for ticket in five_waiting[2:]:
        services.ticket_resolve(ticket=ticket.pk, user=colleague)

    html = person.get(next_page).content.decode()

    assert [int(pk) for pk in re.findall(r'data-ticket-id="(\d+)"', html)] == [t.pk for t in five_waiting[:2]]
    assert 'rel="next"' not in html
