""" "Hand back to the agent" from a tab read while you had the ticket, sent after the agent handed it
to a person again, is a conflict (409), not a second hand-back over the agent's hand-off.

README ("Using it", staff): a hand-back from a page read before the ticket changed hands is refused,
the page then says who has it. A person with the ticket open in two tabs hands it back in one; the
agent answers, and the customer asks for a person, so the agent hands the ticket to a person (nobody
assigned). The other tab still says "you have it"; pressing "Hand back" there gave the ticket to the
agent again: the customer who asked for a person got the agent, and the person never saw why the
agent had stopped. Only a page that shows the ticket as it is now (with a person, nobody assigned)
hands it back.
"""

from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse

from agents.runner import advance
from tests.conftest import make_customer
from tests.staff.conftest import make_support_staff
from tickets import services
from tickets.models import AuthorKind, Ticket, TicketStatus

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_hand_back_from_a_second_tab_does_not_undo_the_agents_hand_off_to_a_person():
    customer = make_customer()
    ticket, _ = services.ticket_open(customer=customer, subject="Kettle", body="Where is my order A-1001?")
    maria = make_support_staff("maria")
    services.ticket_take_over(ticket=ticket.pk, user=maria)
    first, second = Client(), Client()
    first.force_login(maria)
    second.force_login(maria)
    one = first.get(reverse("staff:ticket", args=[ticket.pk]))
    two = second.get(reverse("staff:ticket", args=[ticket.pk]))  # her second tab, read while she has it
    assert one.context["holder"] == two.context["holder"] == maria.pk

    back = first.post(reverse("staff:hand_back", args=[ticket.pk]), {"holder": one.context["holder"]})
    assert back.status_code == 302
    advance(ticket.pk)
    services.message_post(
        ticket=ticket.pk, author_kind=AuthorKind.CUSTOMER, author_user=customer.user,
        body="I want to talk to a person please.", client_msg_id="c2",
    )  # fmt: skip
    advance(ticket.pk)
    assert Ticket.objects.get(pk=ticket.pk).status == TicketStatus.WITH_HUMAN  # the agent handed it to a person

    late = second.post(reverse("staff:hand_back", args=[ticket.pk]), {"holder": two.context["holder"]})

    assert Ticket.objects.get(pk=ticket.pk).status == TicketStatus.WITH_HUMAN, (
        "a tab read while Maria had the ticket handed it to the agent again, over the agent's own hand-off to a "
        "person that she never saw"
    )
    assert late.status_code == 409
    fresh = second.get(reverse("staff:ticket", args=[ticket.pk]))
    assert fresh.context["holder"] == ""
    done = second.post(reverse("staff:hand_back", args=[ticket.pk]), {"holder": fresh.context["holder"]})
    assert done.status_code == 302 and Ticket.objects.get(pk=ticket.pk).status == TicketStatus.OPEN


@pytest.mark.parametrize(("action", "done"), [("resolve", TicketStatus.RESOLVED), ("close", TicketStatus.CLOSED)])
def test_resolve_or_close_from_a_second_tab_does_not_end_a_ticket_given_to_a_person_since(action, done):  # noqa: ANN001
    ticket, _ = services.ticket_open(customer=make_customer(), subject="Kettle", body="Where is my order A-1001?")
    maria = make_support_staff("maria")
    services.ticket_take_over(ticket=ticket.pk, user=maria)
    first, second = Client(), Client()
    first.force_login(maria)
    second.force_login(maria)
    one = first.get(reverse("staff:ticket", args=[ticket.pk]))
    two = second.get(reverse("staff:ticket", args=[ticket.pk]))
    assert (
        first.post(reverse("staff:hand_back", args=[ticket.pk]), {"holder": one.context["holder"]}).status_code == 302
    )
    # The agent stops and gives the ticket to a person (as it does when it parks a ticket): nobody assigned.
    services.ticket_hand_to_person(ticket=ticket.pk, reason="the agent failed: provider down")

    late = second.post(
        reverse(f"staff:{action}", args=[ticket.pk]), {"holder": two.context["holder"], "seen": two.context["last_seq"]}
    )

    assert Ticket.objects.get(pk=ticket.pk).status == TicketStatus.WITH_HUMAN, (
        f"a tab read while Maria had the ticket {action}d it after the agent had handed it to a person"
    )
    assert late.status_code == 409
    fresh = second.get(reverse("staff:ticket", args=[ticket.pk]))
    sent = second.post(
        reverse(f"staff:{action}", args=[ticket.pk]),
        {"holder": fresh.context["holder"], "seen": fresh.context["last_seq"]},
    )
    assert sent.status_code == 302 and Ticket.objects.get(pk=ticket.pk).status == done


def test_a_hand_back_from_a_page_read_before_the_ticket_went_back_and_forth_is_a_conflict():
    """The page was read while the ticket waited for a person (nobody assigned); a colleague handed it
    back meanwhile, and the agent handed it to a person again when the customer asked for one. The
    page still reads as it did: the hand-back is refused (the agent would not hand off again)."""
    customer = make_customer()
    ticket, _ = services.ticket_open(customer=customer, subject="Kettle", body="Where is my order A-1001?")
    services.ticket_hand_to_person(ticket=ticket.pk, reason="the agent failed: model down")
    maria, li = make_support_staff("maria"), make_support_staff("li")
    mine, hers = Client(), Client()
    mine.force_login(maria)
    hers.force_login(li)
    stale = mine.get(reverse("staff:ticket", args=[ticket.pk]))
    assert stale.context["holder"] == "" and stale.context["allowed"]["hand_back"]
    lis = hers.get(reverse("staff:ticket", args=[ticket.pk]))
    form = {"holder": lis.context["holder"], "seen": lis.context["last_seq"]}
    assert hers.post(reverse("staff:hand_back", args=[ticket.pk]), form).status_code == 302
    advance(ticket.pk)
    services.message_post(
        ticket=ticket.pk, author_kind=AuthorKind.CUSTOMER, author_user=customer.user,
        body="I want to talk to a person please.", client_msg_id="c2",
    )  # fmt: skip
    advance(ticket.pk)
    assert Ticket.objects.get(pk=ticket.pk).status == TicketStatus.WITH_HUMAN

    late = mine.post(reverse("staff:hand_back", args=[ticket.pk]), {"holder": "", "seen": stale.context["last_seq"]})

    assert Ticket.objects.get(pk=ticket.pk).status == TicketStatus.WITH_HUMAN, (
        "a page read before the ticket was handed back and handed to a person again gave it to the agent: "
        "nobody answers the customer who asked for a person"
    )
    assert late.status_code == 409
