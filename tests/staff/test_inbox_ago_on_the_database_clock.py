"""The inbox tells how long ago each ticket changed (or came into its queue) on the database's clock.

A ticket's last change and the status change that put it in a queue are stamped on the database's
clock (tickets.services). The "… ago" under them was measured against the clock of the web server
that drew the page: on many hosts, a web server three hours ahead told staff a ticket a customer
had just written on was left alone three hours, and one ten minutes behind said "0 minutes" of a
ticket waiting ten. Staff choose what to answer first by it.
"""

from __future__ import annotations

import datetime
import re
from datetime import timedelta
from types import SimpleNamespace

import pytest
from django.db.models import F
from django.test import Client
from django.urls import reverse

from tests.agents.test_backoff_clock import on_a_host_whose_clock_is_off
from tickets import services
from tickets.models import Ticket, TicketEvent

pytestmark = pytest.mark.django_db(transaction=True)

REAL_DATETIME = datetime.datetime
WAITED = timedelta(minutes=20, seconds=10)


def on_a_web_host_whose_clock_is_off(monkeypatch: pytest.MonkeyPatch, off: timedelta) -> None:
    """Every clock the web server reads is ``off`` from the database's: Django's ``timezone.now`` and
    the ``datetime.now`` that ``timesince`` reads when it is given no "now"."""
    on_a_host_whose_clock_is_off(monkeypatch, off)

    class AnyDatetime(type):
        def __instancecheck__(cls, instance: object) -> bool:
            return isinstance(instance, REAL_DATETIME)

    class HostDatetime(REAL_DATETIME, metaclass=AnyDatetime):
        @classmethod
        def now(cls, tz=None):  # noqa: ANN001, ANN206
            return REAL_DATETIME.now(tz) + off

    host = SimpleNamespace(datetime=HostDatetime, date=datetime.date, timedelta=datetime.timedelta)
    monkeypatch.setattr("django.utils.timesince.datetime", host)


def ago(page: str, ticket_id: int) -> str:
    row = page[page.index(f'data-ticket-id="{ticket_id}"') :]
    return re.search(r'<span class="muted">([^<]*) ago</span>', row).group(1).replace("\xa0", " ")


@pytest.mark.parametrize("off", [timedelta(hours=3), timedelta(minutes=-10)], ids=["ahead", "behind"])
@pytest.mark.parametrize("view", ["open", "needs_person"])
def test_a_web_host_whose_clock_is_off_tells_how_long_ago_on_the_database_clock(
    client: Client, customer, agent_person, monkeypatch, off, view
):  # noqa: ANN001
    ticket, _ = services.ticket_open(customer=customer, subject="Kettle", body="My kettle leaks.")
    services.ticket_hand_to_person(ticket=ticket, reason="asked for a person")
    # It has waited twenty minutes, on the database's clock, since it changed and came to need a person.
    Ticket.objects.filter(pk=ticket.pk).update(updated_at=F("updated_at") - WAITED)
    TicketEvent.objects.filter(ticket=ticket).update(created_at=F("created_at") - WAITED)
    client.force_login(agent_person)

    on_a_web_host_whose_clock_is_off(monkeypatch, off)
    page = client.get(reverse("staff:inbox") + f"?view={view}").content.decode()

    assert ago(page, ticket.pk) == "20 minutes", page[page.index(f'data-ticket-id="{ticket.pk}"') :][:2000]
