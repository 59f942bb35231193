"""The admin list's bulk "Hand back to the agent" leaves a ticket that went to a person after the
list was read (the customer asked for one, the agent stopped), and says so.

README ("Using it", Operations): bulk actions go through the same services as the inbox; a bulk
Resolve or Close leaves a ticket the customer wrote on after the list was read. The bulk hand-back
sent nothing of what the list showed: with "select all" on the "With a person" filter, a ticket the
agent had handed to a person a moment before (the customer asked "I want to talk to a person") was
handed back too. The agent does not hand off twice what it handed off once, so the customer who
asked for a person had nobody: no person's view showed the ticket, and the agent had nothing to
answer. Tickets the list showed with a person are handed back as before.
"""

from __future__ import annotations

import re

import pytest
from django.test import Client

from agents.runner import advance
from tests.conftest import make_customer
from tickets import services
from tickets.admin import TicketAdmin
from tickets.models import AuthorKind, Ticket, TicketStatus

pytestmark = pytest.mark.django_db(transaction=True)

HIDDEN = re.compile(r'<input type="hidden" name="((?:seen-\d+)|listed)" value="(\d+)">')


def _list_as_read(admin_client: Client, query: str) -> dict[str, str]:
    page = admin_client.get("/admin/tickets/ticket/" + query)
    assert page.status_code == 200
    return dict(HIDDEN.findall(page.content.decode()))


@pytest.mark.parametrize("selected", ["on the page", "across pages"])
def test_a_bulk_hand_back_leaves_a_ticket_the_agent_handed_to_a_person_after_the_list_was_read(
    admin_client: Client, monkeypatch, selected: str
):
    parked, _ = services.ticket_open(customer=make_customer(), subject="Toaster", body="My toaster T-1 sparks.")
    services.ticket_hand_to_person(ticket=parked, reason="the agent failed: model down")  # listed with a person
    customer = make_customer()
    asked, _ = services.ticket_open(customer=customer, subject="Kettle", body="Where is my order A-1001?")
    advance(asked.pk)  # the agent answers; the list shows this ticket waiting on the customer
    if selected == "across pages":
        monkeypatch.setattr(TicketAdmin, "list_per_page", 1)
    shown = _list_as_read(admin_client, "?o=-1")  # newest first: the agent's ticket is on the page
    assert f"seen-{asked.pk}" in shown

    services.message_post(
        ticket=asked, author_kind=AuthorKind.CUSTOMER, author_user=customer.user,
        body="I want to talk to a person please.", client_msg_id="c2",
    )  # fmt: skip
    advance(asked.pk)
    assert Ticket.objects.get(pk=asked.pk).status == TicketStatus.WITH_HUMAN  # the agent handed it to a person

    picked = {"_selected_action": [asked.pk, parked.pk]}
    if selected == "across pages":
        picked = {"_selected_action": [asked.pk], "select_across": "1"}
    query = "?status__exact=with_human"
    response = admin_client.post(
        "/admin/tickets/ticket/" + query, {"action": "move_to_open", **picked, **shown}, follow=True
    )

    assert Ticket.objects.get(pk=asked.pk).status == TicketStatus.WITH_HUMAN, (
        "a bulk hand-back from a list read before the customer asked for a person gave the ticket back to the "
        "agent, which does not hand it off twice: nobody answers the customer who asked for a person"
    )
    told = " ".join(str(message) for message in response.context["messages"])
    assert f"#{asked.pk}" in told and "since" in told, told
    assert Ticket.objects.get(pk=parked.pk).status == TicketStatus.OPEN  # what the list showed: handed back
