"""A person answers and hands the ticket back between two steps of one agent pass.

DESIGN.md invariant 12: each model request holds every public message on the ticket up to now.
A pass reads the conversation once; before each later step, once its own commits have shown that
someone else wrote on the ticket, it asks whether a person has written to the customer since, and
if so reads the conversation again. An answer it posts after the person's reply was written with
that reply in view.
"""

from __future__ import annotations

import dataclasses

import pytest

from agents.llm import ModelResponse, ToolCallRequest, Usage
from agents.models import AgentRun, RunStatus
from agents.runner import advance
from agents.tools import REGISTRY
from tests.agents.test_money_path import public_words
from tests.conftest import make_customer, make_order
from tickets import services as ticket_services
from tickets.models import Ticket, TicketStatus

pytestmark = pytest.mark.django_db(transaction=True)

PERSON = "I checked with the carrier: your parcel was lost, we are sending a new one today."
AGENT = "Your order is on its way and should arrive in two days."


def test_an_answer_posted_after_a_persons_reply_and_hand_back_was_written_with_that_reply(person):  # noqa: ANN001
    customer = make_customer()
    order = make_order(customer)
    ticket, _ = ticket_services.ticket_open(customer=customer, subject="Order", body=f"Where is {order.number}?")
    requests: list[list[dict]] = []

    class LooksUpThenAnswers:
        name = "looks-up-then-answers"

        def complete(self, *, messages, tools, on_token=None):  # noqa: ANN001
            requests.append(list(messages))
            if len(requests) == 1:
                # While the model writes the step that asks for the lookup, a person takes the ticket,
                # answers the customer and hands it back to the agent.
                ticket_services.ticket_take_over(ticket=ticket.pk, user=person)
                ticket_services.staff_reply(ticket=ticket.pk, user=person, body=PERSON, client_msg_id="p1")
                ticket_services.ticket_hand_back(ticket=ticket.pk, user=person)
                return ModelResponse(
                    text="",
                    tool_calls=[ToolCallRequest("l1", "lookup_order", f'{{"order_number": "{order.number}"}}')],
                    usage=Usage(10, 5),
                    finish_reason="tool_calls",
                )
            return ModelResponse(text=AGENT, usage=Usage(10, 5))

    advance(ticket.pk, model=LooksUpThenAnswers())

    words = public_words(ticket)
    assert words == [PERSON, AGENT], words
    # Posted after the person's reply: it was written with that reply in view.
    last_request = " ".join(str(m.get("content") or "") for m in requests[-1])
    assert PERSON in last_request, f"the model never saw the person's reply: {requests[-1]}"


def test_a_persons_reply_while_a_call_runs_is_never_answered_over(person, monkeypatch):  # noqa: ANN001
    """The reply lands after the pass's last commit, while a lookup runs: the pass has not been
    told of it by a commit of its own. Whatever the agent then writes is posted only if it was
    written with the reply in view (the answer's own check, under the ticket's lock)."""
    customer = make_customer()
    order = make_order(customer)
    ticket, _ = ticket_services.ticket_open(customer=customer, subject="Order", body=f"Where is {order.number}?")
    lookup = REGISTRY["lookup_order"]

    def lookup_while_a_person_answers(ctx, args):  # noqa: ANN001, ANN202
        ticket_services.ticket_take_over(ticket=ticket.pk, user=person)
        ticket_services.staff_reply(ticket=ticket.pk, user=person, body=PERSON, client_msg_id="p1")
        ticket_services.ticket_hand_back(ticket=ticket.pk, user=person)
        return lookup.handler(ctx, args)

    monkeypatch.setitem(REGISTRY, "lookup_order", dataclasses.replace(lookup, handler=lookup_while_a_person_answers))
    requests: list[list[dict]] = []

    class LooksUpThenAnswers:
        name = "looks-up-then-answers"

        def complete(self, *, messages, tools, on_token=None):  # noqa: ANN001
            requests.append(list(messages))
            if len(requests) == 1:
                return ModelResponse(
                    text="",
                    tool_calls=[ToolCallRequest("l1", "lookup_order", f'{{"order_number": "{order.number}"}}')],
                    usage=Usage(10, 5),
                    finish_reason="tool_calls",
                )
            return ModelResponse(text=AGENT, usage=Usage(10, 5))

    advance(ticket.pk, model=LooksUpThenAnswers())

    words = public_words(ticket)
    assert words[0] == PERSON, words
    if AGENT in words:
        last_request = " ".join(str(m.get("content") or "") for m in requests[-1])
        assert PERSON in last_request, f"an answer written without the person's reply was posted after it: {words}"
    run = AgentRun.objects.get(ticket=ticket)
    assert run.status in {RunStatus.COMPLETED, RunStatus.HANDED_OFF}, run.status
    assert Ticket.objects.get(pk=ticket.pk).status == TicketStatus.OPEN  # back with the agent, nothing parked
