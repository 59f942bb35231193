"""A customer writes while the run waits for a staff decision, and the message's doorbell is lost.

DESIGN.md invariant 2: losing a doorbell may delay work, never lose it. The sweeper counts as work a
message sent during a pause whose writer has not been told it waits (no ``waiting:<id>`` note): it
rings the ticket, the pass tells them once, and then the ticket is left to wait for the decision.
"""

from __future__ import annotations

import pytest

from agents import tasks
from agents.llm import ModelResponse, ToolCallRequest, Usage
from agents.models import AgentRun, ReplayPolicy, RunStatus
from agents.runner import advance
from agents.services import WAITING_NOTE
from agents.tools import REGISTRY, Tool
from tests.conftest import make_customer
from tickets import services as ticket_services
from tickets.models import AuthorKind, Message

pytestmark = pytest.mark.django_db(transaction=True)


class AsksForTheGatedAction:
    name = "asks-for-gated"

    def complete(self, *, messages, tools, on_token=None):  # noqa: ANN001
        if any(m["role"] == "tool" for m in messages):
            return ModelResponse(text="Done.", usage=Usage(10, 5))
        return ModelResponse(
            text="", tool_calls=[ToolCallRequest("g1", "gated_action", "{}")], usage=Usage(10, 5),
            finish_reason="tool_calls",
        )  # fmt: skip


def test_a_message_sent_during_a_pause_whose_doorbell_is_lost_is_still_acknowledged(monkeypatch):
    monkeypatch.setitem(
        REGISTRY,
        "gated_action",
        Tool(
            name="gated_action",
            description="An action staff approve first.",
            parameters={"type": "object", "properties": {}, "additionalProperties": False},
            replay_policy=ReplayPolicy.KEYED,
            handler=lambda ctx, args: {"ok": True},
            needs_approval=lambda ctx, args: "staff approve every one",
        ),
    )
    model = AsksForTheGatedAction()
    ticket, _ = ticket_services.ticket_open(customer=make_customer(), subject="Help", body="Do it, please")
    assert advance(ticket.pk, model=model).state == RunStatus.WAITING_APPROVAL

    # The customer writes during the review; the doorbell of that message is lost.
    monkeypatch.setattr(tasks.advance_ticket, "apply_async", lambda *args, **kwargs: None)
    message, _ = ticket_services.message_post(
        ticket=ticket.pk, author_kind=AuthorKind.CUSTOMER, author_user=ticket.customer.user,
        body="Any news on this?", client_msg_id="c-any-news",
    )  # fmt: skip

    # The sweeper runs (a few times, as beat would) and every ticket it rings is advanced.
    for _ in range(3):
        for ticket_id in tasks.tickets_needing_a_ring():
            advance(ticket_id, model=model)

    acknowledged = Message.objects.filter(ticket=ticket, client_msg_id=f"waiting:{message.pk}", body=WAITING_NOTE)
    assert acknowledged.exists(), "the customer's message during the review was never acknowledged"
    assert ticket.pk not in tasks.tickets_needing_a_ring(), "told once: nothing more to ring for"
    assert AgentRun.objects.get(ticket=ticket).status == RunStatus.WAITING_APPROVAL
