"""A colleague whose username is a word the inbox's lists use for a choice ("me", "none") is chosen as
that colleague. "Assign to: me" (the colleague, listed under their username) assigned the ticket to
the person pressing the button, and "Assignee: none" (the colleague) listed the tickets nobody has;
the colleague's own tickets could not be listed at all. Each choice on the page now sends a value
only it can have."""

from __future__ import annotations

import html
import re

import pytest
from django.test import Client
from django.urls import reverse

from tests.staff.conftest import make_support_staff
from tickets import services
from tickets.models import Ticket

pytestmark = pytest.mark.django_db


def option(page: str, select: str, label: str) -> str:
    """The value the page's list ``select`` sends for the choice that reads ``label``."""
    listed = re.search(rf'<select[^>]*name="{select}"[^>]*>(.*?)</select>', page, re.S)[1]
    values = {
        html.unescape(text).strip(): html.unescape(value)
        for value, text in re.findall(r'<option value="([^"]*)"[^>]*>([^<]*)</option>', listed)
    }
    return values[label]


def test_assign_to_a_colleague_named_me_gives_the_ticket_to_them(client: Client, agent_person, customer):  # noqa: ANN001
    colleague = make_support_staff("me")
    ticket, _ = services.ticket_open(customer=customer, subject="Kettle", body="It leaks")
    client.force_login(agent_person)
    page = client.get(reverse("staff:ticket", args=[ticket.pk])).content.decode()

    form = {"assignee": option(page, "assignee", "me"), "holder": "", "assigned": ""}
    assert client.post(reverse("staff:assign", args=[ticket.pk]), form).status_code == 302
    assert Ticket.objects.get(pk=ticket.pk).assignee == colleague

    form["assignee"] = option(page, "assignee", "Me (maria)")
    form["assigned"] = str(colleague.pk)
    assert client.post(reverse("staff:assign", args=[ticket.pk]), form).status_code == 302
    assert Ticket.objects.get(pk=ticket.pk).assignee == agent_person


def test_the_inbox_lists_a_colleague_named_none_apart_from_the_tickets_nobody_has(
    client: Client, agent_person, customer
):  # noqa: ANN001
    colleague = make_support_staff("none")
    theirs, _ = services.ticket_open(customer=customer, subject="Theirs", body="x", client_ref="a")
    free, _ = services.ticket_open(customer=customer, subject="Free", body="y", client_ref="b")
    services.ticket_take_over(ticket=theirs, user=colleague)
    client.force_login(agent_person)
    page = client.get(reverse("staff:inbox"), {"view": "open"}).content.decode()

    def listed(label: str) -> set[int]:
        found = client.get(reverse("staff:inbox"), {"view": "open", "assignee": option(page, "assignee", label)})
        return {int(n) for n in re.findall(r'data-ticket-id="(\d+)"', found.content.decode())}

    assert listed("none") == {theirs.pk}
    assert listed("Nobody") == {free.pk}
