"""The messages the agent's own tools post (post_reply, add_internal_note, hand_off_to_human) are
keyed in the product's namespace (``tool:<the call's idempotency key>``), which a customer's message
ID cannot enter: a customer who sends the call's bare idempotency key first takes nothing from
the agent, whose interim reply is still posted.
"""

from __future__ import annotations

import json

import pytest
from django.test import Client

from agents.conversation import build_conversation
from agents.llm import ModelResponse, ToolCallRequest
from agents.models import AgentRun, ModelStep
from agents.runner import advance
from tests.conftest import make_customer
from tickets import services as ticket_services
from tickets.models import AuthorKind, Message

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(120)]

INTERIM = "Let me check that order for you."


def test_a_customer_message_id_cannot_take_the_key_of_the_agents_post_reply():
    customer = make_customer()
    ticket, _ = ticket_services.ticket_open(customer=customer, subject="Order", body="Where is my order?")
    browser = Client()
    browser.force_login(customer.user)
    statuses = []

    class CustomerTakesTheKeyThenInterim:
        name = "takes-key"

        def __init__(self) -> None:
            self.first = True

        def complete(self, *, messages, tools, on_token=None):  # noqa: ANN001
            if self.first:
                self.first = False
                run = AgentRun.objects.filter(ticket=ticket).latest("pk")
                step = ModelStep.objects.filter(run=run).count()
                key = f"t{ticket.pk}-r{run.pk}-s{step}-c0"
                response = browser.post(
                    f"/tickets/{ticket.pk}/messages",
                    data=json.dumps({"client_msg_id": key, "body": "hello?"}),
                    content_type="application/json",
                )
                statuses.append((key, response.status_code))
                return ModelResponse(
                    text="", tool_calls=[ToolCallRequest("p1", "post_reply", json.dumps({"text": INTERIM}))]
                )
            return ModelResponse(text="Anything else?")

    advance(ticket.pk, model=CustomerTakesTheKeyThenInterim())

    agent_posts = list(
        Message.objects.filter(ticket=ticket, author_kind=AuthorKind.AGENT).values_list("body", flat=True)
    )
    assert INTERIM in agent_posts, (statuses, agent_posts)
    assert agent_posts.count(INTERIM) == 1
    # The model reads the customer's message (whatever its ID) and the interim reply once: as the
    # call's result, not again as a message of its own.
    run = AgentRun.objects.filter(ticket=ticket).latest("pk")
    last = ModelStep.objects.filter(run=run).latest("index")
    conversation = build_conversation(run)
    assert sum("hello?" in (m.get("content") or "") for m in conversation) == 1, conversation
    assert sum(m.get("content") == INTERIM for m in conversation if m["role"] == "assistant") == 0, conversation
    assert last.response_text == "Anything else?"
