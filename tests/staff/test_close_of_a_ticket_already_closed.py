"""Closing (or resolving) a ticket that already is closed (resolved) says so: nothing was changed.

A tab read before a colleague closed the ticket pressed Close and was told "Closed.", as if this
person had just closed it; the admin's bulk Close over a list with closed tickets among the
selected counted them too ("300 ticket(s) now closed." when 150 were closed by it). Now it says
who closed it and that nothing was changed, as a hand-back of a ticket already handed back says,
and the bulk action counts only the tickets it changed.
"""

from __future__ import annotations

import pytest
from django.contrib.messages import INFO, SUCCESS
from django.test import Client
from django.urls import reverse

from tests.conftest import make_customer
from tests.staff.conftest import make_support_staff
from tickets import services
from tickets.models import Ticket, TicketEvent, TicketStatus

pytestmark = pytest.mark.django_db


def _said(response) -> list[tuple[int, str]]:  # noqa: ANN001
    return [(m.level, m.message) for m in response.context["messages"]]


@pytest.mark.parametrize(
    ("button", "status", "service"),
    [
        ("close", TicketStatus.CLOSED, services.ticket_close),
        ("resolve", TicketStatus.RESOLVED, services.ticket_resolve),
    ],
)
def test_a_tab_read_before_a_colleague_finished_the_ticket_is_told_it_changed_nothing(button, status, service):  # noqa: ANN001
    ticket, _ = services.ticket_open(customer=make_customer(), subject="Kettle", body="My kettle K-9 leaks.")
    maria, li = make_support_staff("maria"), make_support_staff("li")
    tab_of_li = Client()
    tab_of_li.force_login(li)
    read = tab_of_li.get(reverse("staff:ticket", args=[ticket.pk]))
    seen = str(Ticket.objects.get(pk=ticket.pk).last_event_seq)
    service(ticket=ticket.pk, user=maria)  # Maria, from her own page
    events = TicketEvent.objects.filter(ticket=ticket).count()

    answer = tab_of_li.post(
        reverse(f"staff:{button}", args=[ticket.pk]), {"holder": str(read.context["holder"]), "seen": seen}, follow=True
    )

    said = _said(answer)
    assert Ticket.objects.get(pk=ticket.pk).status == status
    assert TicketEvent.objects.filter(ticket=ticket).count() == events
    assert said and all(level == INFO for level, _ in said), f"li's {button} of a finished ticket was told {said}"
    assert "maria" in said[0][1] and "nothing was changed" in said[0][1], said


def test_a_bulk_close_counts_only_the_tickets_it_closed(admin_client, admin_user):  # noqa: ANN001
    customer = make_customer()
    ids = [services.ticket_open(customer=customer, subject=f"T{n}", body="Hello")[0].pk for n in range(6)]
    for pk in ids[:2]:
        services.ticket_close(ticket=pk, user=admin_user)
    changelist = reverse("admin:tickets_ticket_changelist")
    listed = admin_client.get(changelist).context["listed_event"]

    answer = admin_client.post(
        changelist, {"action": "move_to_closed", "_selected_action": ids, "listed": str(listed)}, follow=True
    )

    said = _said(answer)
    assert (SUCCESS, "4 ticket(s) now closed.") in said, said
    assert [level for level, words in said if "already closed" in words] == [INFO], said
    assert Ticket.objects.filter(pk__in=ids, status=TicketStatus.CLOSED).count() == 6
