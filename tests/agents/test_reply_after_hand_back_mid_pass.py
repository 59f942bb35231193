"""A person answers and hands the ticket back between two steps of one agent pass.

DESIGN.md invariant 12: each model request holds every public message on the ticket up to now.
A pass reads the conversation once; before each later step it asks whether a person has written
to the customer since, and if so reads the conversation again. The answer it posts after the
person's reply was written with that reply in view.
"""

from __future__ import annotations

import pytest

from agents.llm import ModelResponse, ToolCallRequest, Usage
from agents.runner import advance
from tests.agents.test_money_path import public_words
from tests.conftest import make_customer, make_order
from tickets import services as ticket_services

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
