"""A pseudonymised bundle withholds what a customer wrote that the ticket no longer shows.

Only the ticket's subject and rating as they are now were hunted in the rest of the bundle. A rating
given again replaces its comment, and a member of staff may edit the subject: the earlier comment and
the subject the customer wrote stayed, whole, in the timeline's "rated", "ticket_opened" and "edited"
events, and the subject in every model request the agent made before the edit.
"""

from __future__ import annotations

import pytest

from agents.runner import advance
from tests.conftest import make_customer, make_order
from tests.staff.conftest import make_support_staff
from tests.state.conftest import bundle_bytes, export, verify
from tests.state.test_bundle import empty_the_ledger, restore
from tickets import services as ticket_services
from tickets.models import Customer, TicketEvent

pytestmark = [pytest.mark.django_db, pytest.mark.timeout(120)]

FIRST_COMMENT = "Slow, and please stop calling 07700 900123"
FIRST_SUBJECT = "Parcel for 14 Larkspur Lane"


def test_a_customers_earlier_rating_comment_and_subject_are_withheld_where_the_timeline_keeps_them(tmp_path):
    customer = make_customer()
    make_order(customer, number="S-2001")
    ticket, _ = ticket_services.ticket_open(customer=customer, subject=FIRST_SUBJECT, body="Where is order S-2001?")
    advance(ticket.pk)
    person = make_support_staff("maria")
    ticket_services.ticket_edit(ticket=ticket.pk, user=person, changes={"subject": "Where is S-2001"})
    ticket_services.ticket_resolve(ticket=ticket.pk, user=person)
    ticket_services.ticket_rate(ticket=ticket.pk, user=customer.user, score=2, comment=FIRST_COMMENT)
    ticket_services.ticket_rate(ticket=ticket.pk, user=customer.user, score=4, comment="Better in the end")
    kinds = list(TicketEvent.objects.filter(ticket=ticket).order_by("seq").values_list("kind", flat=True))

    path = export(tmp_path, ticket)  # the default: pseudonymised

    data = bundle_bytes(path).decode()
    assert [words for words in (FIRST_COMMENT, FIRST_SUBJECT, "Larkspur", "07700") if words in data] == []
    assert verify(path)[0] == 0
    empty_the_ledger(restart_keys=False)
    restore(path)
    assert verify(path, database=True)[0] == 0
    assert list(TicketEvent.objects.filter(ticket=ticket).order_by("seq").values_list("kind", flat=True)) == kinds


def test_a_customers_name_before_a_person_corrected_it_is_pseudonymised_where_the_agent_was_told_it(tmp_path):
    customer = make_customer()
    Customer.objects.filter(pk=customer.pk).update(name="Dorothea Quimby")
    make_order(customer, number="S-2001")
    ticket, _ = ticket_services.ticket_open(customer=customer, subject="Where is it", body="Where is order S-2001?")
    advance(ticket.pk)  # the agent's request names the customer as she was then
    Customer.objects.filter(pk=customer.pk).update(name="Dorothea Lark")  # corrected in the admin since

    data = bundle_bytes(export(tmp_path, ticket)).decode()

    assert [name for name in ("Quimby", "Dorothea", "Lark") if name in data] == []
    assert f"Customer: Customer {customer.pk}." in data
