"""A ticket the agent handed to a person itself (its step limit, an approval that expired) and that
staff hand back without a word is answered.

README, "Using it" / Staff: "Hand back to the agent: it answers whatever the customer wrote after
your last reply (everything unanswered, if you did not reply)". The customer's question was never
answered by anyone: after the hand-back the sweeper rings the ticket and the agent answers it, as it
does after a take-over (``agents.services._unanswered_again``).
"""

from __future__ import annotations

import pytest

from agents.llm import ModelResponse, ToolCallRequest, Usage
from agents.models import AgentRun, RunStatus
from agents.runner import advance
from agents.selectors import tickets_with_agent_work
from tests.agents.conftest import retry_time_comes
from tests.conftest import make_customer
from tickets import services as ticket_services
from tickets.models import AuthorKind, Message, Ticket, TicketStatus

pytestmark = pytest.mark.django_db(transaction=True)

ANSWER = "Your order A-1001 is on its way and arrives Friday."


class LoopsThenAnswers:
    """Looks the order up again and again (as a confused model does) until ``answer`` is set."""

    name = "loops-then-answers"

    def __init__(self) -> None:
        self.answer = False
        self.n = 0

    def complete(self, *, messages, tools, on_token=None):  # noqa: ANN001
        self.n += 1
        if self.answer:
            return ModelResponse(text=ANSWER, usage=Usage(10, 5))
        return ModelResponse(
            text="",
            tool_calls=[ToolCallRequest(f"c{self.n}", "list_orders", "{}")],
            usage=Usage(10, 5),
            finish_reason="tool_calls",
        )


def test_a_ticket_the_agent_handed_off_at_its_step_limit_is_answered_after_a_silent_hand_back(settings, person):  # noqa: ANN001
    settings.AGENT_MAX_STEPS = 3
    ticket, _ = ticket_services.ticket_open(customer=make_customer(), subject="Order", body="Where is my order?")
    model = LoopsThenAnswers()
    for _ in range(10):
        outcome = advance(ticket.pk, model=model)
        if outcome.state != "retry":
            break
        retry_time_comes(ticket.pk)
    ticket.refresh_from_db()
    assert ticket.status == TicketStatus.WITH_HUMAN
    assert AgentRun.objects.get(ticket=ticket).status == RunStatus.HANDED_OFF

    # The person looks, says nothing to the customer, and hands the ticket back to the agent.
    ticket_services.ticket_hand_back(ticket=ticket.pk, user=person)
    model.answer = True
    rung = ticket.pk in tickets_with_agent_work()
    advance(ticket.pk, model=model)

    answered = Message.objects.filter(ticket=ticket, author_kind=AuthorKind.AGENT, is_public=True).exists()
    assert rung and answered, (
        "Hand back to the agent promises it answers everything unanswered when the person did not reply; "
        f"the customer's question is left unanswered (sweeper rings it: {rung}, agent answered: {answered}, "
        f"ticket status: {Ticket.objects.get(pk=ticket.pk).status})"
    )


def test_a_ticket_handed_off_when_its_approval_expired_is_answered_after_a_silent_hand_back(sandbox, person):  # noqa: ANN001
    from datetime import timedelta

    from django.utils import timezone

    from approvals.services import approvals_expire_due
    from tests.agents.test_money_path import order_for

    customer = make_customer()
    order_for(customer, "R-2502", 64900, sandbox)
    ticket, _ = ticket_services.ticket_open(
        customer=customer, subject="Refund", body="Please refund $649.00 on order R-2502"
    )
    advance(ticket.pk)  # above the threshold: waits for staff
    approvals_expire_due(now=timezone.now() + timedelta(days=4))  # nobody decided in time
    advance(ticket.pk)  # the customer is told a person will look at it; the ticket goes to a person
    ticket.refresh_from_db()
    assert ticket.status == TicketStatus.WITH_HUMAN

    ticket_services.ticket_hand_back(ticket=ticket.pk, user=person)  # without a word to the customer
    rung = ticket.pk in tickets_with_agent_work()
    before = Message.objects.filter(ticket=ticket, author_kind=AuthorKind.AGENT).count()
    answers = LoopsThenAnswers()
    answers.answer = True
    advance(ticket.pk, model=answers)
    answered = Message.objects.filter(ticket=ticket, author_kind=AuthorKind.AGENT).count() > before
    assert rung and answered, (
        "Hand back to the agent promises it answers everything unanswered when the person did not reply; "
        f"the customer's refund request is left unanswered (sweeper rings it: {rung}, agent answered: {answered})"
    )


def test_a_customer_who_asked_for_a_person_is_not_handed_off_again_after_a_silent_hand_back(person):  # noqa: ANN001
    """The other side: the agent did what was asked (handed the ticket to a person and said so); after
    a hand-back without a word, that request is answered and is not acted on again."""
    ticket, _ = ticket_services.ticket_open(customer=make_customer(), subject="Help", body="I want to talk to a person")
    advance(ticket.pk)
    assert Ticket.objects.get(pk=ticket.pk).status == TicketStatus.WITH_HUMAN
    ticket_services.ticket_hand_back(ticket=ticket.pk, user=person)
    assert ticket.pk not in tickets_with_agent_work()
    advance(ticket.pk)
    assert Ticket.objects.get(pk=ticket.pk).status == TicketStatus.OPEN
    assert AgentRun.objects.filter(ticket=ticket).count() == 1
