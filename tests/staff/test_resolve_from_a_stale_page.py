"""Resolve or Close pressed on a page read before the customer's latest message is refused (409):
the message would otherwise be left unanswered on a ticket nobody watches (the agent's run ends for
the person, the sweeper leaves resolved and closed tickets alone). The page sends the last timeline
event it showed (``seen``, kept current by the live updates); pressed again from a page that shows
the message, it is done. Real worker and beat processes, HTTP for the customer and the staff member."""

from __future__ import annotations

import time

import pytest
from django.test import Client
from django.urls import reverse

from tests.agents.test_money_path import order_for
from tests.conftest import make_customer
from tests.staff.conftest import make_support_staff
from tests.workers import wait_until
from tickets import realtime
from tickets import services as ticket_services
from tickets.models import AuthorKind, Message, Ticket

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.workers, pytest.mark.timeout(180)]


def _answered_once(ticket: Ticket) -> bool:
    return Message.objects.filter(ticket=ticket, author_kind=AuthorKind.AGENT, is_public=True).exists() and not (
        Message.objects.filter(ticket=ticket, author_kind=AuthorKind.CUSTOMER, agent_handled_at__isnull=True).exists()
    )


@pytest.mark.parametrize("action", ["resolve", "close"])
def test_a_message_sent_as_staff_resolve_is_answered_acknowledged_or_with_a_person(cluster, sandbox, action):  # noqa: ANN001
    customer = make_customer()
    order_for(customer, "Q-3201", 3000, sandbox)
    ticket, _ = ticket_services.ticket_open(customer=customer, subject="Where is it", body="Where is my order Q-3201?")
    cluster.worker(OFFLINE_MODEL_TOKEN_DELAY_MS="80")
    cluster.beat()
    wait_until(lambda: _answered_once(ticket), timeout=60, what="the agent's first answer", cluster=cluster)

    staff = Client()
    staff.force_login(make_support_staff("maria"))
    page = staff.get(reverse("staff:ticket", args=[ticket.pk]))  # the page the Resolve is pressed on
    assert page.status_code == 200

    # The customer writes again (through the chat's endpoint) ...
    chat = Client()
    chat.force_login(customer.user)
    sent = chat.post(
        f"/tickets/{ticket.pk}/messages",
        {"body": "It still has not arrived and the tracking link is dead. What now?", "client_msg_id": "late-message"},
        content_type="application/json",
    )
    assert sent.status_code in (200, 201), sent.content
    late = Message.objects.get(ticket=ticket, client_msg_id="late-message")
    # ... and the agent starts answering it (its answer streams), as staff press the button.
    wait_until(lambda: realtime.streamed_so_far(ticket.pk)[0] is not None, timeout=30, what="the answer to start",
               cluster=cluster)  # fmt: skip
    seen = {"seen": str(page.context["last_seq"])}  # what the page's form sends
    refused = staff.post(reverse(f"staff:{action}", args=[ticket.pk]), seen)
    assert refused.status_code == 409 and "The customer wrote" in refused.content.decode()

    time.sleep(3)  # the sweeper runs every second: three sweeps; the worker has noticed the status change
    ticket.refresh_from_db()
    late.refresh_from_db()
    later = Message.objects.filter(ticket=ticket, is_public=True, id__gt=late.pk).exclude(
        author_kind=AuthorKind.CUSTOMER
    )
    acknowledged = Message.objects.filter(ticket=ticket, client_msg_id=f"waiting:{late.pk}").exists()
    assert ticket.status not in ("resolved", "closed")
    assert later.exists() or acknowledged or ticket.status == "with_human", (
        f"the customer's message {late.body!r}, sent just before staff pressed {action.title()} on a page read "
        f"before it, is never answered, acknowledged or given to a person: ticket {ticket.status}, "
        f"message taken in by the agent: {late.agent_handled_at is not None}"
    )


def test_resolve_from_a_page_that_shows_every_message_is_done(db):  # noqa: ANN001
    customer = make_customer()
    ticket, _ = ticket_services.ticket_open(customer=customer, subject="Thanks", body="All good, thank you!")
    staff = Client()
    staff.force_login(make_support_staff("maria"))
    page = staff.get(reverse("staff:ticket", args=[ticket.pk]))
    done = staff.post(reverse("staff:resolve", args=[ticket.pk]), {"seen": str(page.context["last_seq"])})
    assert done.status_code == 302
    ticket.refresh_from_db()
    assert ticket.status == "resolved"
