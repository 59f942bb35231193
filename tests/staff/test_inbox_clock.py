"""The staff inbox puts the ticket left alone longest on top, and shows each ticket's last message,
whatever the clocks of the hosts that wrote to them say.

A ticket's last change was stamped with the clock of the host that made it, and its last message
was the one whose host's clock read the latest. On many hosts, with one web server ten minutes
behind, a ticket a customer wrote on there rose to the top as if left alone ten minutes longer than
the one really waiting longest (ahead, it sank to the bottom, under tickets that waited less), and
the preview showed the agent's earlier answer as the last word instead of the customer's new
question. Both now follow the database's clock and the ticket's timeline.
"""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from tests.agents.test_backoff_clock import on_a_host_whose_clock_is_off
from tickets import services
from tickets.models import AuthorKind, Message, Ticket, TicketStatus

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def person(client: Client, agent_person) -> Client:  # noqa: ANN001
    client.force_login(agent_person)
    return client


def on_a_web_host_whose_clock_is_off(monkeypatch: pytest.MonkeyPatch, offset: timedelta, action):  # noqa: ANN001, ANN201
    """Run ``action`` on a web server whose clock is ``offset`` from the database's."""
    with monkeypatch.context() as host:
        on_a_host_whose_clock_is_off(host, offset)
        # A column's default is the clock function itself, taken when the model was defined.
        host.setattr(Message._meta.get_field("created_at"), "_get_default", timezone.now)
        return action()


def inbox(person: Client, view: str) -> str:
    return person.get(reverse("staff:inbox") + f"?view={view}").content.decode()


def listed(page: str) -> list[int]:
    return [int(n) for n in re.findall(r'data-ticket-id="(\d+)"', page)]


def test_a_ticket_written_on_a_host_whose_clock_runs_behind_does_not_jump_the_queue(
    person: Client, customer, monkeypatch
):  # noqa: ANN001
    longest, _ = services.ticket_open(customer=customer, subject="Waiting longest", body="first")
    services.ticket_hand_to_person(ticket=longest, reason="asked for a person")
    since, _ = services.ticket_open(customer=customer, subject="Waiting since", body="second")
    services.ticket_hand_to_person(ticket=since, reason="asked for a person")
    # The customer writes again on the first ticket, through a web server whose clock is behind: it
    # is now the one left alone the least.
    on_a_web_host_whose_clock_is_off(
        monkeypatch,
        timedelta(minutes=-10),
        lambda: services.message_post(ticket=longest, author_kind=AuthorKind.CUSTOMER, body="Anyone there?"),
    )

    # "All open" lists the one left alone longest on top: the other, since the customer wrote.
    assert listed(inbox(person, "open")) == [since.pk, longest.pk]
    # "Needs a person" lists them by when they came to need one: the customer writing moves nothing.
    assert listed(inbox(person, "needs_person")) == [longest.pk, since.pk]


def test_a_ticket_written_on_a_host_whose_clock_runs_ahead_is_not_left_at_the_bottom(
    person: Client, customer, monkeypatch
):  # noqa: ANN001
    def ask_for_a_person() -> Ticket:
        ticket, _ = services.ticket_open(customer=customer, subject="Waiting longest", body="first")
        services.ticket_hand_to_person(ticket=ticket, reason="asked for a person")
        return ticket

    longest = on_a_web_host_whose_clock_is_off(monkeypatch, timedelta(minutes=10), ask_for_a_person)
    since, _ = services.ticket_open(customer=customer, subject="Waiting since", body="second")
    services.ticket_hand_to_person(ticket=since, reason="asked for a person")

    assert listed(inbox(person, "needs_person")) == [longest.pk, since.pk]
    assert listed(inbox(person, "open")) == [longest.pk, since.pk]


def test_the_preview_shows_the_customers_last_message_written_on_a_host_whose_clock_runs_behind(
    person: Client, customer, agent_person, monkeypatch
):  # noqa: ANN001
    ticket, _ = services.ticket_open(customer=customer, subject="Kettle", body="My kettle leaks.")
    services.ticket_take_over(ticket=ticket, user=agent_person)
    services.staff_reply(ticket=ticket.pk, user=agent_person, body="Sorry to hear that, looking.", client_msg_id="r1")
    on_a_web_host_whose_clock_is_off(
        monkeypatch,
        timedelta(minutes=-10),
        lambda: services.message_post(ticket=ticket, author_kind=AuthorKind.CUSTOMER, body="It is the K-1 model."),
    )
    assert Ticket.objects.get(pk=ticket.pk).status == TicketStatus.WITH_HUMAN

    page = inbox(person, "mine")
    row = page[page.index(f'data-ticket-id="{ticket.pk}"') :]
    preview = re.search(r'<td class="preview">(.*?)</td>', row, re.DOTALL).group(1)
    assert "It is the K-1 model." in preview and "looking" not in preview
