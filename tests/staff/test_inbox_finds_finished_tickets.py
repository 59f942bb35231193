"""Resolved and closed tickets can be found from the staff inbox: the "All tickets" view lists every
ticket, so choosing Status = Closed or searching a closed ticket's id finds it ("my ticket #N was
closed"), where every other view leaves finished tickets out."""

from __future__ import annotations

import re

import pytest
from django.test import Client
from django.urls import reverse

from staff.selectors import VIEW_SLUGS
from tests.staff.conftest import make_support_staff
from tickets import services
from tickets.models import TicketStatus

pytestmark = pytest.mark.django_db


def test_a_closed_ticket_is_found_by_the_status_filter_or_its_id_in_some_inbox_view(client: Client, customer):
    person = make_support_staff("maria")
    client.force_login(person)
    ticket, _ = services.ticket_open(customer=customer, subject="Broken kettle", body="My kettle leaks.")
    services.ticket_resolve(ticket=ticket, user=person)
    services.ticket_close(ticket=ticket, user=person)
    ticket.refresh_from_db()
    assert ticket.status == TicketStatus.CLOSED

    def listed(**params: str) -> set[int]:
        page = client.get(reverse("staff:inbox"), params).content.decode()
        return {int(n) for n in re.findall(r'data-ticket-id="(\d+)"', page)}

    by_status = {view: listed(view=view, status=TicketStatus.CLOSED) for view in sorted(VIEW_SLUGS)}
    by_id = {view: listed(view=view, q=f"#{ticket.pk}") for view in sorted(VIEW_SLUGS)}

    assert any(ticket.pk in found for found in by_status.values()), (
        f"the inbox's Status filter offers 'Closed' but no view lists closed ticket #{ticket.pk}: {by_status}"
    )
    assert any(ticket.pk in found for found in by_id.values()), (
        f"searching the inbox for #{ticket.pk} finds the closed ticket in no view: {by_id}"
    )
