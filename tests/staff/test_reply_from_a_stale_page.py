"""A person's reply answers what their page showed, not what the customer wrote after it was read.

The staff page sends the last timeline event it showed (``seen``, kept current by the live
updates). The customer's messages after it stay unanswered: the inbox still shows them waiting,
the person is told, and after a hand-back the agent answers them."""

from __future__ import annotations

import pytest
from django.contrib.messages import get_messages
from django.test import Client
from django.urls import reverse

from tests.conftest import make_customer
from tests.staff.conftest import make_support_staff
from tickets import services as ticket_services
from tickets.models import AuthorKind, Message

pytestmark = pytest.mark.django_db


def _ticket_page_and_a_later_message():  # noqa: ANN202
    customer = make_customer()
    ticket, _ = ticket_services.ticket_open(customer=customer, subject="Late parcel", body="Where is my parcel?")
    first = Message.objects.get(ticket=ticket, author_kind=AuthorKind.CUSTOMER)
    staff = Client()
    staff.force_login(make_support_staff("maria"))
    page = staff.get(reverse("staff:ticket", args=[ticket.pk]))
    assert page.status_code == 200
    later, _ = ticket_services.message_post(
        ticket=ticket, author_kind=AuthorKind.CUSTOMER, author_user=customer.user,
        body="Also, the second parcel arrived damaged.", client_msg_id="later",
    )  # fmt: skip
    return ticket, first, later, staff, page


def test_a_reply_from_a_page_read_before_the_customers_new_message_leaves_it_waiting():
    ticket, first, later, staff, page = _ticket_page_and_a_later_message()
    form = {
        "body": "Your parcel is on its way.",
        "client_msg_id": "r1",
        "holder": "",
        "seen": str(page.context["last_seq"]),
    }
    sent = staff.post(reverse("staff:reply", args=[ticket.pk]), form)
    assert sent.status_code == 302
    first.refresh_from_db()
    later.refresh_from_db()
    assert first.agent_handled_at is not None, "the message the page showed is answered by the reply"
    assert later.agent_handled_at is None, "the message the page never showed was marked answered by the reply"
    told = [str(m) for m in get_messages(sent.wsgi_request)]
    assert any("wrote again" in m for m in told), told

    # Handed back, the agent has that message to answer.
    ticket_services.ticket_hand_back(ticket=ticket, user=sent.wsgi_request.user)
    waiting = Message.objects.filter(ticket=ticket, author_kind=AuthorKind.CUSTOMER, agent_handled_at__isnull=True)
    assert list(waiting) == [later]


def test_a_reply_from_a_page_that_shows_every_message_answers_them_all():
    ticket, first, later, staff, _ = _ticket_page_and_a_later_message()
    current = staff.get(reverse("staff:ticket", args=[ticket.pk]))
    form = {"body": "Both handled.", "client_msg_id": "r2", "holder": "", "seen": str(current.context["last_seq"])}
    sent = staff.post(reverse("staff:reply", args=[ticket.pk]), form)
    assert sent.status_code == 302
    assert not Message.objects.filter(
        ticket=ticket, author_kind=AuthorKind.CUSTOMER, agent_handled_at__isnull=True
    ).exists()
    assert not any("wrote again" in str(m) for m in get_messages(sent.wsgi_request))
