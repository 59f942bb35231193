"""A customer who thanks the agent while it works on their refund, before it asks for their Confirm,
reads the refund told once, then an answer to their thanks: not the refund told twice in a row.

Their "Thank you!", written after the run started, is taken in by the next run. Read where it was
written (before the lookup, or between the lookup and the refund call), it made the next run read
the earlier run's calls, answered already, as done for the thanks, and tell the refund again (the
crash drill, seed 501: "message 58 repeats the reply before it")."""

from __future__ import annotations

import pytest

from agents.conversation import build_conversation
from agents.models import AgentRun, CallStatus, ToolCall
from agents.offline_model import OfflineDeterministicModel
from agents.runner import advance
from tests.agents.conftest import while_tool_runs
from tests.agents.test_money_gates import confirm
from tests.agents.test_money_path import order_for, paid
from tests.approvals.test_approvals import replies
from tests.conftest import make_customer
from tickets import services as ticket_services
from tickets.models import AuthorKind, Message

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.timeout(120),
    pytest.mark.usefixtures("quick_provider_retries"),
    pytest.mark.customer_confirms,
]

TOLD = "I've refunded $50.00 on order W-7101."


def asked():  # noqa: ANN201
    customer = make_customer()
    ticket, _ = ticket_services.ticket_open(customer=customer, subject="Refund", body="Please refund order W-7101")
    return ticket


def thank(ticket) -> None:  # noqa: ANN001
    ticket_services.message_post(ticket=ticket.pk, author_kind=AuthorKind.CUSTOMER, body="Thank you!")


def confirmed_and_answered(ticket, model=None) -> None:  # noqa: ANN001
    """The customer confirms the refund they are asked about; the refund is made and told, and the
    next run answers what they wrote meanwhile."""
    call = ToolCall.objects.get(ticket=ticket, name="issue_refund")
    assert call.status == CallStatus.AWAITING_CONFIRMATION
    assert confirm(ticket, call) == 200
    advance(ticket.pk, model=model)


def test_thanks_written_while_the_agent_reads_the_request_is_answered_and_the_refund_not_told_again(sandbox):  # noqa: ANN001
    ticket = asked()
    order = order_for(ticket.customer, "W-7101", 5000, sandbox)

    class ThankedWhileItAnswers(OfflineDeterministicModel):
        def complete(self, *, messages, tools, on_token=None):  # noqa: ANN001, ANN202
            if not any(m["role"] == "tool" for m in messages):
                thank(ticket)
            return super().complete(messages=messages, tools=tools, on_token=on_token)

    model = ThankedWhileItAnswers()
    advance(ticket.pk, model=model)  # the customer thanks while the model decides to look the order up
    confirmed_and_answered(ticket, model)

    assert [r["amount"] for r in paid(sandbox, order)] == [5000]
    told, answer = replies(ticket)
    assert TOLD in told, told
    assert answer != told, "the refund told twice in a row, the customer's thanks unanswered"
    assert answer.startswith("You're welcome"), answer


def test_thanks_written_during_the_lookup_is_answered_and_the_refund_not_told_again(sandbox, monkeypatch):  # noqa: ANN001
    ticket = asked()
    order = order_for(ticket.customer, "W-7101", 5000, sandbox)
    while_tool_runs(monkeypatch, "lookup_order", lambda: thank(ticket))
    advance(ticket.pk)  # looks the order up (the customer thanks meanwhile), asks for their Confirm
    advance(ticket.pk)  # the ring after it: the customer is told their message waits for their answer
    note = Message.objects.get(ticket=ticket, client_msg_id__startswith="waiting:").body
    confirmed_and_answered(ticket)

    assert [r["amount"] for r in paid(sandbox, order)] == [5000]
    told, answer = replies(ticket)
    assert TOLD in told, told
    assert answer != told, "the refund told twice in a row, the customer's thanks unanswered"
    assert answer.startswith("You're welcome"), answer
    # What the turn that answered the thanks read: the refund told, then the thanks and the note on it.
    read = [m.get("content") for m in build_conversation(AgentRun.objects.order_by("pk").last())]
    assert read.index(told) < read.index("Thank you!") < read.index(f"[automatic notice] {note}"), read
    assert not Message.objects.filter(ticket=ticket, author_kind=AuthorKind.CUSTOMER, agent_handled_at__isnull=True)
