"""A person answers and hands the ticket back between two steps of one agent pass.

DESIGN.md invariant 12: each model request holds every public message on the ticket up to now.
A pass reads the conversation once; before each later step, once its own commits have shown that
someone else wrote on the ticket, it asks whether a person has written to the customer since, and
if so reads the conversation again. An answer it posts after the person's reply was written with
that reply in view.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from agents.llm import ModelResponse, ToolCallRequest, Usage
from agents.models import AgentRun, RunStatus
from agents.runner import advance
from tests.agents.conftest import while_tool_runs
from tests.agents.test_money_path import public_words
from tests.conftest import make_customer, make_order
from tickets import services as ticket_services
from tickets.models import Ticket, TicketStatus

pytestmark = pytest.mark.django_db(transaction=True)

PERSON = "I checked with the carrier: your parcel was lost, we are sending a new one today."
AGENT = "Your order is on its way and should arrive in two days."


def answers_and_hands_back(person, ticket_id: int, words: str = PERSON) -> Callable[[], None]:  # noqa: ANN001
    """A person takes the ticket, answers the customer and hands the ticket back to the agent."""

    def act() -> None:
        ticket_services.ticket_take_over(ticket=ticket_id, user=person)
        ticket_services.staff_reply(ticket=ticket_id, user=person, body=words, client_msg_id="p1")
        ticket_services.ticket_hand_back(ticket=ticket_id, user=person)

    return act


class LooksUpThenAnswers:
    """Asks to look the order up, then answers; ``meanwhile`` runs while it writes the first step.
    ``requests``: what each call was sent."""

    name = "looks-up-then-answers"

    def __init__(self, order_number: str, meanwhile: Callable[[], None] | None = None) -> None:
        self.order_number, self.meanwhile, self.requests = order_number, meanwhile, []

    def complete(self, *, messages, tools, on_token=None):  # noqa: ANN001, ANN201
        self.requests.append(list(messages))
        if len(self.requests) > 1:
            return ModelResponse(text=AGENT, usage=Usage(10, 5))
        if self.meanwhile is not None:
            self.meanwhile()
        arguments = f'{{"order_number": "{self.order_number}"}}'
        return ModelResponse(
            text="", tool_calls=[ToolCallRequest("l1", "lookup_order", arguments)], usage=Usage(10, 5),
            finish_reason="tool_calls",
        )  # fmt: skip


def test_an_answer_posted_after_a_persons_reply_and_hand_back_was_written_with_that_reply(person):  # noqa: ANN001
    customer = make_customer()
    order = make_order(customer)
    ticket, _ = ticket_services.ticket_open(customer=customer, subject="Order", body=f"Where is {order.number}?")

    # While the model writes the step that asks for the lookup, a person takes the ticket, answers
    # the customer and hands it back to the agent.
    model = LooksUpThenAnswers(order.number, meanwhile=answers_and_hands_back(person, ticket.pk))
    advance(ticket.pk, model=model)

    words = public_words(ticket)
    assert words == [PERSON, AGENT], words
    # Posted after the person's reply: it was written with that reply in view.
    last_request = " ".join(str(m.get("content") or "") for m in model.requests[-1])
    assert PERSON in last_request, f"the model never saw the person's reply: {model.requests[-1]}"


def test_a_persons_reply_while_a_call_runs_is_never_answered_over(person, monkeypatch):  # noqa: ANN001
    """The reply lands after the pass's last commit, while a lookup runs: the pass has not been
    told of it by a commit of its own. Whatever the agent then writes is posted only if it was
    written with the reply in view (the answer's own check, under the ticket's lock)."""
    customer = make_customer()
    order = make_order(customer)
    ticket, _ = ticket_services.ticket_open(customer=customer, subject="Order", body=f"Where is {order.number}?")
    while_tool_runs(monkeypatch, "lookup_order", answers_and_hands_back(person, ticket.pk))
    model = LooksUpThenAnswers(order.number)
    advance(ticket.pk, model=model)

    words = public_words(ticket)
    assert words[0] == PERSON, words
    if AGENT in words:
        last_request = " ".join(str(m.get("content") or "") for m in model.requests[-1])
        assert PERSON in last_request, f"an answer written without the person's reply was posted after it: {words}"
    run = AgentRun.objects.get(ticket=ticket)
    assert run.status in {RunStatus.COMPLETED, RunStatus.HANDED_OFF}, run.status
    assert Ticket.objects.get(pk=ticket.pk).status == TicketStatus.OPEN  # back with the agent, nothing parked
