"""Invariant 12: every public message is in the model's request, a person's reply under any ID its browser sent."""

from __future__ import annotations

import pytest

from agents.conversation import build_conversation
from agents.models import AgentRun, ToolCall
from agents.runner import advance
from tests.approvals.conftest import make_staff
from tests.conftest import make_customer, make_order
from tickets import services as ticket_services

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_staff_reply_is_in_the_conversation_whatever_client_msg_id_its_browser_sent():
    """A person's public reply is a public message: the model reads it. Its client message ID is
    whatever the staff page's browser sent (no colon), and the conversation drops any non-customer
    message whose ID equals a call's bare idempotency key (t<ticket>-r<run>-s<step>-c<call>)."""
    customer = make_customer()
    order = make_order(customer, number="A-5151")
    ticket, _ = ticket_services.ticket_open(customer=customer, subject="Help", body=f"Where is {order.number}?")
    advance(ticket.pk)
    key = ToolCall.objects.filter(ticket=ticket).values_list("idempotency_key", flat=True).first()
    assert key  # e.g. "t1-r1-s0-c0"
    person = make_staff("replier", can_decide=False)
    ticket_services.staff_reply(ticket=ticket.pk, user=person, body="STAFF: it arrives Friday.", client_msg_id=key)

    run = AgentRun.objects.filter(ticket=ticket).latest("id")
    said = [m.get("content") or "" for m in build_conversation(run)]

    assert any("it arrives Friday" in text for text in said), said
