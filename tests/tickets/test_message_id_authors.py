"""A client message ID names one author's message on a ticket: a message of someone else under the
same ID is never handed back as the sender's own, nor is the sender's message dropped silently."""

from __future__ import annotations

import pytest

from tests.approvals.conftest import make_staff
from tests.conftest import make_customer
from tickets import services
from tickets.models import AuthorKind, Message

pytestmark = pytest.mark.django_db


def test_a_staff_reply_under_a_customers_message_id_is_a_conflict_not_dropped():
    customer = make_customer()
    ticket, _ = services.ticket_open(customer=customer, subject="Kettle", body="My kettle leaks.")
    services.message_post(
        ticket=ticket,
        author_kind=AuthorKind.CUSTOMER,
        author_user=customer.user,
        body="Still waiting",
        client_msg_id="m1",
    )
    person = make_staff("id-person", can_decide=False)

    with pytest.raises(services.MessageConflict):
        services.staff_reply(ticket=ticket.pk, user=person, body="Still waiting", client_msg_id="m1")
    assert not Message.objects.filter(ticket=ticket, author_kind=AuthorKind.STAFF).exists()


def test_a_customer_message_under_a_staff_reply_id_is_a_conflict_not_the_staff_reply():
    customer = make_customer()
    ticket, _ = services.ticket_open(customer=customer, subject="Kettle", body="My kettle leaks.")
    person = make_staff("id-person-2", can_decide=False)
    services.staff_reply(ticket=ticket.pk, user=person, body="It ships today.", client_msg_id="s1")

    with pytest.raises(services.MessageConflict):
        services.message_post(
            ticket=ticket, author_kind=AuthorKind.CUSTOMER, author_user=customer.user, body="It ships today.",
            client_msg_id="s1",
        )  # fmt: skip
    # The same sender's retry still gets its original back.
    again, created = services.staff_reply(ticket=ticket.pk, user=person, body="It ships today.", client_msg_id="s1")
    assert not created and again.author_user_id == person.pk
