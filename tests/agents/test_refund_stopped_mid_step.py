"""A refund a person stopped next to the payment (a take-over while the model wrote the step) is
reviewed when asked again, like one a person stopped while it waited.

With the customer's Confirm off, the check next to the payment stops the refund when a person
takes the ticket over (or closes it) while the step is written. Handed back, or reopened by the
customer, the same request asked again goes to staff: no money moves on a request a person
stopped until a person agrees to it.
"""

from __future__ import annotations

import json

import pytest

from agents.llm import ModelResponse, ToolCallRequest
from agents.models import CallStatus, Refund, RefundStatus
from agents.runner import advance
from tests.agents.test_money_gates import refund_calls
from tests.agents.test_money_path import order_for, paid
from tests.conftest import make_customer
from tickets import services as ticket_services
from tickets.models import AuthorKind

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.timeout(120),
    pytest.mark.usefixtures("quick_provider_retries"),
]


class RefundWhenAsked:
    """Asks for the refund whenever the customer has the last word; says "Done." after a tool result.
    ``meanwhile``: run once, while the first step is written (a person takes the ticket over)."""

    name = "stopped-refund-when-asked"

    def __init__(self, number: str, cents: int, meanwhile=None) -> None:  # noqa: ANN001
        self.number, self.cents, self.meanwhile = number, cents, meanwhile
        self.n = 0

    def complete(self, *, messages, tools, on_token=None):  # noqa: ANN001
        if messages[-1]["role"] != "user":
            return ModelResponse(text="Done.")
        if self.meanwhile is not None:
            self.meanwhile()
            self.meanwhile = None
        self.n += 1
        args = {"order_number": self.number, "amount_cents": self.cents}
        return ModelResponse(text="", tool_calls=[ToolCallRequest(f"r{self.n}", "issue_refund", json.dumps(args))])


@pytest.mark.parametrize("then", ["take_over_and_hand_back", "close_and_reopen"])
def test_a_refund_a_person_stopped_mid_step_is_reviewed_when_asked_again(sandbox, person, then):  # noqa: ANN001
    customer = make_customer()
    order = order_for(customer, "RV-1701", 5000, sandbox)  # $50.00: under every threshold
    ask = "Please refund $50.00 on order RV-1701"
    ticket, _ = ticket_services.ticket_open(customer=customer, subject="Refund", body=ask)

    def a_person_takes_it():
        ticket_services.ticket_take_over(ticket=ticket.pk, user=person)
        if then == "close_and_reopen":
            ticket_services.ticket_resolve(ticket=ticket.pk, user=person)

    model = RefundWhenAsked("RV-1701", 5000, meanwhile=a_person_takes_it)
    advance(ticket.pk, model=model)
    (first,) = refund_calls(ticket)
    assert first.status == CallStatus.FAILED and "a person took the ticket over" in first.error
    assert paid(sandbox, order) == []  # the person stopped it

    if then == "take_over_and_hand_back":
        ticket_services.ticket_hand_back(ticket=ticket.pk, user=person)
    # The customer asks again, the same words (on a resolved ticket this reopens it).
    ticket_services.message_post(ticket=ticket.pk, author_kind=AuthorKind.CUSTOMER, author_user=customer.user, body=ask)
    advance(ticket.pk, model=model)

    again = refund_calls(ticket)[-1]
    assert again.pk != first.pk
    assert again.approval_required, (
        "the refund a person stopped is asked for again and not sent to staff: "
        f"{again.status}, paid at the provider: {[r['amount'] for r in paid(sandbox, order)]}"
    )
    assert not Refund.objects.filter(order=order, status=RefundStatus.SUCCEEDED).exists()
    assert paid(sandbox, order) == []
