"""A refund the agent decided on its own (under every threshold, the customer's Confirm turned off)
is not paid when the customer wrote after the conversation it was decided from was read: the model
never read those words ("Stop, please cancel the refund, the package just arrived", written while
the agent looked the order up). The call ends unrun and the next run answers the message: the refund
is made then if it still applies, and not if they took it back.

A run takes the customer's messages in when it starts; one written during the run was answered by
the next run, after the refund it might have stopped had been paid."""

from __future__ import annotations

import pytest

from agents.models import NOT_RUN, CallStatus, Refund, ToolCall
from agents.runner import advance
from tests.agents.conftest import while_tool_runs
from tests.agents.test_money_gates import Refunds, confirm
from tests.agents.test_money_path import order_for, paid
from tests.approvals.test_approvals import replies
from tests.conftest import make_customer
from tickets import services as ticket_services
from tickets.models import AuthorKind, Message

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.timeout(120),
    pytest.mark.usefixtures("quick_provider_retries"),
]

UNREAD = "the customer wrote while it was being decided, before it was carried out"
ASKED = "Please refund $20.00 on order W-7001"
STOP = "Stop, please cancel the refund, the package just arrived."


def asked(sandbox):  # noqa: ANN001, ANN201
    customer = make_customer()
    order = order_for(customer, "W-7001", 5000, sandbox)  # $20.00 of $50.00: under every threshold
    ticket, _ = ticket_services.ticket_open(customer=customer, subject="Refund", body=ASKED)
    return ticket, order


def write(ticket, body: str) -> None:  # noqa: ANN001
    ticket_services.message_post(ticket=ticket.pk, author_kind=AuthorKind.CUSTOMER, body=body)


def test_a_cancel_written_while_the_agent_looked_the_order_up_pays_nothing(sandbox, monkeypatch):  # noqa: ANN001
    ticket, order = asked(sandbox)
    while_tool_runs(monkeypatch, "lookup_order", lambda: write(ticket, STOP))

    advance(ticket.pk)  # looks the order up (the customer writes), decides the refund: not paid

    assert paid(sandbox, order) == [], "paid on words read before the customer asked to stop it"
    call = ToolCall.objects.get(ticket=ticket, name="issue_refund")
    assert (call.status, call.error) == (CallStatus.FAILED, f"{NOT_RUN}: {UNREAD}")
    assert not Refund.objects.filter(tool_call=call).exists()
    answer = replies(ticket)[-1]  # the next run, under the same lease, answered the message
    assert "have not refunded anything" in answer and "W-7001" in answer, answer
    assert not Message.objects.filter(ticket=ticket, author_kind=AuthorKind.CUSTOMER, agent_handled_at__isnull=True)


def test_a_cancel_that_lands_as_the_refund_is_about_to_be_sent_stops_it(sandbox, monkeypatch):  # noqa: ANN001
    """Written after the call was cleared to run, before the refund's intent committed: the check next
    to the payment sees it (the refund's transaction holds the ticket's row)."""
    ticket, order = asked(sandbox)
    while_tool_runs(monkeypatch, "issue_refund", lambda: write(ticket, STOP))

    advance(ticket.pk)

    assert paid(sandbox, order) == []
    call = ToolCall.objects.get(ticket=ticket, name="issue_refund")
    assert (call.status, call.error) == (CallStatus.FAILED, f"{NOT_RUN}: {UNREAD}")
    assert "have not refunded anything" in replies(ticket)[-1]


def test_a_message_that_does_not_take_it_back_gets_the_refund_made_in_the_next_run(sandbox, monkeypatch):  # noqa: ANN001
    ticket, order = asked(sandbox)
    while_tool_runs(monkeypatch, "lookup_order", lambda: write(ticket, "Thank you so much!"))

    advance(ticket.pk)

    assert [r["amount"] for r in paid(sandbox, order)] == [2000]  # once, by the run that read the message
    first, second = ToolCall.objects.filter(ticket=ticket, name="issue_refund").order_by("pk")
    assert first.status == CallStatus.FAILED and second.status == CallStatus.SUCCEEDED
    assert second.run_id != first.run_id
    assert "refunded $20.00 on order W-7001" in replies(ticket)[-1], replies(ticket)


def test_a_message_written_before_the_run_started_is_read_and_does_not_stop_the_refund(sandbox):  # noqa: ANN001
    ticket, order = asked(sandbox)
    write(ticket, "Thanks in advance!")

    advance(ticket.pk)

    assert [r["amount"] for r in paid(sandbox, order)] == [2000]
    assert ToolCall.objects.get(ticket=ticket, name="issue_refund").status == CallStatus.SUCCEEDED


def test_a_model_that_asks_for_the_refund_at_once_is_stopped_by_words_written_while_it_answered(sandbox):  # noqa: ANN001
    """The refund in the run's first step: the customer's words came while the model wrote it."""
    customer = make_customer()
    order = order_for(customer, "W-7002", 5000, sandbox)
    ticket, _ = ticket_services.ticket_open(customer=customer, subject="Refund", body="Refund W-7002")

    class WritesWhileTheModelAnswers(Refunds):
        def complete(self, *, messages, tools, on_token=None):  # noqa: ANN001, ANN202
            if not any(m["role"] == "tool" for m in messages):
                write(ticket, STOP)
            return super().complete(messages=messages, tools=tools, on_token=on_token)

    advance(ticket.pk, model=WritesWhileTheModelAnswers(("W-7002", 2000)))

    assert paid(sandbox, order) == []
    assert ToolCall.objects.get(ticket=ticket, name="issue_refund").error == f"{NOT_RUN}: {UNREAD}"


@pytest.mark.customer_confirms
def test_with_the_customers_confirm_words_written_before_it_do_not_stop_the_refund(sandbox, monkeypatch):  # noqa: ANN001
    """Their Confirm, pressed after they wrote, is their last word on the refund."""
    ticket, order = asked(sandbox)
    while_tool_runs(monkeypatch, "lookup_order", lambda: write(ticket, "Thanks!"))
    advance(ticket.pk)  # the customer is asked to confirm
    call = ToolCall.objects.get(ticket=ticket, name="issue_refund")
    assert call.status == CallStatus.AWAITING_CONFIRMATION
    assert confirm(ticket, call) == 200
    advance(ticket.pk)

    assert [r["amount"] for r in paid(sandbox, order)] == [2000]
