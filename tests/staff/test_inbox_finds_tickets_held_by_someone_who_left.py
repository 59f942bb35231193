"""A ticket a colleague holds after they left the team (deactivated, or out of the "Support staff" group) waits
for nobody: the inbox's assignee filter offered only the people who can work tickets, so it could not list
the tickets of someone who left, and "Nobody" did not list them either. The filter offers every person who
holds an unfinished ticket, and says who can no longer work tickets."""

from __future__ import annotations

import re

import pytest
from django.contrib.auth.models import Group
from django.test import Client
from django.urls import reverse

from staff.permissions import GROUP
from tests.conftest import make_customer
from tests.staff.conftest import make_support_staff
from tickets import services

pytestmark = pytest.mark.django_db


def listed(page: str) -> list[int]:
    return [int(pk) for pk in re.findall(r'data-ticket-id="(\d+)"', page)]


@pytest.mark.parametrize("how", ["deactivated", "left the group"])
def test_the_assignee_filter_finds_the_tickets_of_a_colleague_who_left(how):
    person = Client()
    person.force_login(make_support_staff("maria"))
    li = make_support_staff("li")
    held, _ = services.ticket_open(customer=make_customer(), subject="Broken kettle", body="Hello")
    services.ticket_take_over(ticket=held.pk, user=li)
    if how == "deactivated":
        li.is_active = False
        li.save(update_fields=["is_active"])
    else:
        li.groups.remove(Group.objects.get(name=GROUP))

    inbox = person.get(reverse("staff:inbox"), {"view": "needs_person"}).content.decode()

    option = re.search(r'<option value="li"[^>]*>([^<]*)</option>', inbox)
    assert option is not None, "the assignee filter does not offer a colleague who holds a ticket"
    assert "cannot work tickets" in option.group(1)
    filtered = person.get(reverse("staff:inbox"), {"view": "needs_person", "assignee": "li"}).content.decode()
    assert listed(filtered) == [held.pk]


def test_a_colleague_who_left_and_holds_nothing_is_not_offered():
    person = Client()
    person.force_login(make_support_staff("maria"))
    li = make_support_staff("li")
    li.is_active = False
    li.save(update_fields=["is_active"])

    inbox = person.get(reverse("staff:inbox")).content.decode()

    assert '<option value="li"' not in inbox
    assert '<option value="maria"' in inbox


def test_the_ticket_page_says_who_holds_it_when_they_left_the_team():
    person = Client()
    person.force_login(make_support_staff("maria"))
    li = make_support_staff("li")
    held, _ = services.ticket_open(customer=make_customer(), subject="Broken kettle", body="Hello")
    services.ticket_take_over(ticket=held.pk, user=li)
    li.is_active = False
    li.save(update_fields=["is_active"])

    page = person.get(reverse("staff:ticket", args=[held.pk])).content.decode()

    select = page[page.index('<select id="assignee"') :]
    select = select[: select.index("</select>")]
    selected = re.findall(r'<option value="([^"]*)"[^>]*selected[^>]*>([^<]*)</option>', select)
    assert selected == [("li", "li (cannot work tickets)")], f"the assign box shows {selected or 'Nobody'}"
