"""A person who takes the ticket over while the model writes a step reads nothing more from the agent,
and neither do staff on the approval dashboard.

README, "A person's decision ends the agent's part": while a person has the ticket the agent says
nothing, and a request a person stopped cannot be decided. The step written meanwhile was carried on
as if nobody had come:

- its calls were announced to the customer ("Looking up your order", "Working on your refund") under
  "A person from our team has joined", and the model was asked again after each lookup, step after
  step, until it replied (the reply alone was held back);
- a refund in it that needs a staff approval told the customer "Your refund request is under review
  by our team." and put a card on the dashboards that any decision on is refused ("A person has had
  ticket #N since the agent asked").

The step's calls are still recorded, and the request too, withdrawn (the pass that follows ends the
run), as a Confirm question asked in such a step is, without showing it.
"""

from __future__ import annotations

import json

import pytest

from agents.llm import ModelResponse, ToolCallRequest
from agents.models import AgentRun, RunStatus
from agents.runner import advance
from approvals import selectors as approval_selectors
from approvals.models import ApprovalRequest, ApprovalStatus
from tests.agents.test_money_path import order_for, paid
from tests.agents.test_refund_stopped_mid_step import RefundWhenAsked
from tests.conftest import make_customer
from tickets import presenters, selectors
from tickets import services as ticket_services
from tickets.models import Ticket

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(120)]


class LooksUpAgainAndAgain:
    """Looks the order up at every step, three times, then answers; ``meanwhile`` runs while the first
    step is written."""

    name = "looks-up-again-and-again"

    def __init__(self, number: str, meanwhile) -> None:  # noqa: ANN001
        self.number, self.meanwhile, self.asked = number, meanwhile, 0

    def complete(self, *, messages, tools, on_token=None):  # noqa: ANN001
        self.asked += 1
        if self.meanwhile is not None:
            self.meanwhile()
            self.meanwhile = None
        if self.asked > 3:
            return ModelResponse(text="Your order is on its way.")
        args = json.dumps({"order_number": self.number})
        return ModelResponse(text="", tool_calls=[ToolCallRequest(f"l{self.asked}", "lookup_order", args)])


def shown_after_the_person_joined(ticket: Ticket) -> list[str]:
    """The words of the customer's chat after "A person from our team has joined the conversation."."""
    items, _ = presenters.present_events(selectors.ticket_timeline(ticket=ticket, public_only=True))
    words = [str(item.get("text") or "") for item in items]
    joined = words.index("A person from our team has joined the conversation.")
    return [w for w in words[joined + 1 :] if w]


def test_the_agent_announces_nothing_and_asks_the_model_no_more_once_a_person_took_the_ticket(sandbox, person):  # noqa: ANN001
    customer = make_customer()
    order_for(customer, "RV-3201", 5000, sandbox)
    ticket, _ = ticket_services.ticket_open(customer=customer, subject="Where", body="Where is RV-3201?")
    model = LooksUpAgainAndAgain("RV-3201", lambda: ticket_services.ticket_take_over(ticket=ticket.pk, user=person))

    advance(ticket.pk, model=model)
    advance(ticket.pk, model=model)

    assert shown_after_the_person_joined(ticket) == []
    assert model.asked == 1
    assert AgentRun.objects.get(ticket=ticket).status == RunStatus.HANDED_OFF


def test_a_request_asked_while_a_person_took_the_ticket_reaches_neither_the_customer_nor_the_dashboard(
    sandbox,  # noqa: ANN001
    person,  # noqa: ANN001
):
    customer = make_customer()
    order = order_for(customer, "RV-3301", 64900, sandbox)
    ticket, _ = ticket_services.ticket_open(customer=customer, subject="Refund", body="Refund $649.00 on RV-3301")
    model = RefundWhenAsked(
        "RV-3301", 64900, meanwhile=lambda: ticket_services.ticket_take_over(ticket=ticket.pk, user=person)
    )

    advance(ticket.pk, model=model)

    assert shown_after_the_person_joined(ticket) == []
    assert list(approval_selectors.approvals_pending().filter(ticket=ticket)) == []

    advance(ticket.pk, model=model)  # the take-over's ring: the run ends for the person
    assert AgentRun.objects.get(ticket=ticket).status == RunStatus.HANDED_OFF
    assert list(ApprovalRequest.objects.filter(ticket=ticket).values_list("status", flat=True)) == [
        ApprovalStatus.WITHDRAWN
    ]
    assert shown_after_the_person_joined(ticket) == []
    assert paid(sandbox, order) == []
