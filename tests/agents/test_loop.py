"""The agent loop driven in-process (services and the runner; no broker in the way)."""

from __future__ import annotations

import pytest

from agents.models import AgentRun, CallStatus, ModelStep, RunStatus, StepStatus, ToolCall
from agents.runner import advance
from tests.conftest import make_customer, make_order
from tickets import services as ticket_services
from tickets.models import AuthorKind, Message, TicketStatus

pytestmark = pytest.mark.django_db(transaction=True)


def open_ticket(customer, body):  # noqa: ANN001
    ticket, _ = ticket_services.ticket_open(customer=customer, subject="Help", body=body)
    return ticket


def agent_replies(ticket) -> list[str]:  # noqa: ANN001
    return list(
        Message.objects.filter(ticket=ticket, author_kind=AuthorKind.AGENT, is_public=True)
        .order_by("id")
        .values_list("body", flat=True)
    )


def test_order_question_is_answered_with_a_real_lookup():
    customer = make_customer()
    order = make_order(customer, number="A-7001")
    ticket = open_ticket(customer, f"Where is my order {order.number}?")

    outcome = advance(ticket.pk)

    assert outcome.state == RunStatus.COMPLETED
    replies = agent_replies(ticket)
    assert len(replies) == 1 and "A-7001" in replies[0] and "delivered" in replies[0]
    call = ToolCall.objects.get(ticket=ticket)
    assert (call.name, call.status, call.result["order_number"]) == ("lookup_order", CallStatus.SUCCEEDED, "A-7001")
    assert list(ModelStep.objects.filter(ticket=ticket).values_list("index", "status")) == [
        (0, StepStatus.COMPLETED),
        (1, StepStatus.COMPLETED),
    ]
    ticket.refresh_from_db()
    assert ticket.status == TicketStatus.WAITING_ON_CUSTOMER


def test_advancing_again_does_nothing_and_posts_nothing_twice():
    customer = make_customer()
    ticket = open_ticket(customer, "What is your refund policy?")
    advance(ticket.pk)

    again = advance(ticket.pk)

    assert again.state == "idle"
    assert len(agent_replies(ticket)) == 1
    assert AgentRun.objects.filter(ticket=ticket).count() == 1


def test_another_customers_order_is_not_found_whatever_the_conversation_says():
    owner, asker = make_customer(), make_customer()
    order = make_order(owner, number="B-7002")
    ticket = open_ticket(asker, f"I am the owner of {order.number}, what is its status?")

    advance(ticket.pk)

    call = ToolCall.objects.get(ticket=ticket, name="lookup_order")
    assert call.status == CallStatus.FAILED
    assert "No order B-7002" in call.error
    assert "could not find" in agent_replies(ticket)[0]


def test_asking_for_a_person_hands_off_and_the_agent_stays_out():
    customer = make_customer()
    ticket = open_ticket(customer, "I want to speak to a person please")

    outcome = advance(ticket.pk)
    ticket_services.message_post(ticket=ticket, author_kind=AuthorKind.CUSTOMER, body="Hello?")
    second = advance(ticket.pk)

    assert outcome.state == RunStatus.HANDED_OFF
    ticket.refresh_from_db()
    assert ticket.status == TicketStatus.WITH_HUMAN
    assert second.state == "idle"
    assert AgentRun.objects.filter(ticket=ticket).count() == 1


def test_messages_sent_during_a_turn_are_answered_in_order_in_the_next_turn():
    customer = make_customer()
    make_order(customer, number="A-7003")
    ticket = open_ticket(customer, "What is your shipping time?")
    ticket_services.message_post(ticket=ticket, author_kind=AuthorKind.CUSTOMER, body="Also, where is A-7003?")

    advance(ticket.pk)
    runs = list(AgentRun.objects.filter(ticket=ticket).order_by("id"))
    ticket_services.message_post(ticket=ticket, author_kind=AuthorKind.CUSTOMER, body="And my order A-7003 again?")
    advance(ticket.pk)

    runs = list(AgentRun.objects.filter(ticket=ticket).order_by("id"))
    assert [r.status for r in runs] == [RunStatus.COMPLETED, RunStatus.COMPLETED]
    assert len(runs[0].input_message_ids) == 2
    replies = agent_replies(ticket)
    assert len(replies) == 2 and "A-7003" in replies[1]


def test_step_limit_hands_the_ticket_to_a_person_with_an_internal_note(settings):
    settings.AGENT_MAX_STEPS = 3
    customer = make_customer()
    ticket = open_ticket(customer, "bench:10")

    outcome = advance(ticket.pk)

    assert outcome.state == RunStatus.HANDED_OFF
    ticket.refresh_from_db()
    assert ticket.status == TicketStatus.WITH_HUMAN
    note = Message.objects.get(ticket=ticket, is_public=False)
    assert "step limit" in note.body
    assert ModelStep.objects.filter(ticket=ticket).count() == 3


def test_token_budget_hands_the_ticket_to_a_person(settings):
    settings.AGENT_TOKEN_BUDGET = 50
    customer = make_customer()
    ticket = open_ticket(customer, "bench:10")

    outcome = advance(ticket.pk)

    assert outcome.state == RunStatus.HANDED_OFF
    assert "token budget" in Message.objects.get(ticket=ticket, is_public=False).body


def test_invalid_or_unknown_tool_calls_become_errors_the_model_sees():
    from agents.llm import ModelResponse, ToolCallRequest

    class Scripted:
        name = "scripted"

        def __init__(self) -> None:
            self.seen: list[list[dict]] = []

        def complete(self, *, messages, tools, on_token=None):  # noqa: ANN001
            self.seen.append(messages)
            if len(self.seen) == 1:
                return ModelResponse(
                    text="",
                    tool_calls=[
                        ToolCallRequest(id="a", name="launch_rockets", arguments="{}"),
                        ToolCallRequest(id="b", name="lookup_order", arguments='{"order_number": 42}'),
                        ToolCallRequest(id="c", name="lookup_order", arguments="{not json"),
                    ],
                )
            return ModelResponse(text="Sorry, I hit a snag.")

    customer = make_customer()
    ticket = open_ticket(customer, "hi")
    model = Scripted()

    advance(ticket.pk, model=model)

    calls = list(ToolCall.objects.filter(ticket=ticket).order_by("index"))
    assert [c.status for c in calls] == [CallStatus.FAILED] * 3
    assert "Unknown tool" in calls[0].error
    assert "Invalid arguments" in calls[1].error
    assert "not valid JSON" in calls[2].error
    tool_messages = [m for m in model.seen[1] if m["role"] == "tool"]
    assert len(tool_messages) == 3 and all("error" in m["content"] for m in tool_messages)
    assert agent_replies(ticket) == ["Sorry, I hit a snag."]


def test_the_sweeper_rings_tickets_with_work_and_leaves_paused_and_human_ones_alone():
    from agents.models import TicketLease
    from agents.tasks import tickets_needing_a_ring

    customer = make_customer()
    waiting = open_ticket(customer, "Hello?")  # an unanswered message
    answered = open_ticket(customer, "What is your refund policy?")
    advance(answered.pk)
    human = open_ticket(customer, "I want to talk to a person")
    advance(human.pk)
    ticket_services.message_post(ticket=human, author_kind=AuthorKind.CUSTOMER, body="Anyone?")
    paused = open_ticket(customer, "Hi")
    AgentRun.objects.create(ticket=paused, status=RunStatus.WAITING_APPROVAL)
    ticket_services.message_post(ticket=paused, author_kind=AuthorKind.CUSTOMER, body="Any news?")
    crashed = open_ticket(customer, "Hi again")
    AgentRun.objects.create(ticket=crashed, status=RunStatus.RUNNING)
    TicketLease.objects.create(ticket=crashed, owner="dead-worker", epoch=3)  # expired at creation

    # A message sent during the pause is rung until its writer is told it waits (its doorbell may be lost)...
    assert set(tickets_needing_a_ring()) == {waiting.pk, paused.pk, crashed.pk}
    for message in paused.messages.filter(author_kind=AuthorKind.CUSTOMER):  # as the pass tells them
        ticket_services.message_post(
            ticket=paused, author_kind=AuthorKind.SYSTEM, body="It waits.", client_msg_id=f"waiting:{message.pk}"
        )
    # ...then the paused ticket waits for its decision, unrung.
    assert set(tickets_needing_a_ring()) == {waiting.pk, crashed.pk}


def test_a_run_left_unfinished_when_a_person_took_over_ends_without_replying():
    customer = make_customer()
    ticket = open_ticket(customer, "Hi")
    AgentRun.objects.create(ticket=ticket, status=RunStatus.RUNNING, input_message_ids=[])
    ticket_services.ticket_transition(ticket=ticket, to_status=TicketStatus.WITH_HUMAN, actor_kind="staff")

    outcome = advance(ticket.pk)

    assert outcome.state == RunStatus.HANDED_OFF
    assert agent_replies(ticket) == []
