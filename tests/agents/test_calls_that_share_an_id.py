"""Parallel tool calls that share an id are two calls, each answered under an id of its own.

Some OpenAI-compatible endpoints (DeepSeek's, Zhipu GLM's, as reported in HKUDS/nanobot#3943) give
every parallel call of an answer the same ``id``. The agent refused such an answer whole as poison
("tool call id ... is used twice in one step"): the model was asked again, answered the same way,
and after three tries the ticket was parked with a person and the customer told "something went
wrong on our side", for a question the model had answered well. The id only pairs each call with
its result in the conversation, and the agent stores the answer once, so a call whose id was taken
is given a fresh one at the adapter boundary and both calls run. So is a call a model of the
deployment's own gives no id at all (it was refused as poison the same way).
"""

from __future__ import annotations

import pytest

from agents.llm import ModelResponse, ToolCallRequest, Usage
from agents.llm_openai import OpenAIChatModel
from agents.models import AgentRun, CallStatus, RunStatus, ToolCall
from agents.runner import advance
from tests.agents.openai_server import OpenAIServer
from tests.conftest import make_customer, make_order
from tickets import services as ticket_services
from tickets.models import AuthorKind, Message, TicketStatus

pytestmark = pytest.mark.django_db(transaction=True)


def test_two_order_look_ups_streamed_under_one_id_are_both_made_and_the_customer_is_answered():
    customer = make_customer()
    for number in ("D-7101", "D-7102"):
        make_order(customer, number=number)
    ticket, _ = ticket_services.ticket_open(customer=customer, subject="Orders", body="Where are D-7101 and D-7102?")
    server = OpenAIServer(dialect="same-id").start()
    try:
        model = OpenAIChatModel(model="test-model", api_key="sk-test", base_url=server.url, timeout=5.0)
        ids = server.enqueue_tool_calls([("lookup_order", {"order_number": n}) for n in ("D-7101", "D-7102")])
        assert ids[0] == ids[1]  # the endpoint's habit
        server.enqueue_text("Both orders have been delivered.")

        outcome = advance(ticket.pk, model=model)
    finally:
        server.stop()

    assert outcome.state == RunStatus.COMPLETED, (outcome, AgentRun.objects.get(ticket=ticket).last_error)
    calls = list(ToolCall.objects.filter(ticket=ticket).order_by("index"))
    assert [(c.name, c.status, c.result["order_number"]) for c in calls] == [
        ("lookup_order", CallStatus.SUCCEEDED, "D-7101"),
        ("lookup_order", CallStatus.SUCCEEDED, "D-7102"),
    ]
    assert calls[0].model_call_id == ids[0] and calls[1].model_call_id != ids[0]
    # The second request pairs each result with its own call, as the first answer is replayed.
    second = server.requests[1]["messages"]
    [assistant] = [m for m in second if m["role"] == "assistant" and m.get("tool_calls")]
    asked = [c["id"] for c in assistant["tool_calls"]]
    answered = [m["tool_call_id"] for m in second if m["role"] == "tool"]
    assert asked == answered == [c.model_call_id for c in calls] and len(set(asked)) == 2
    agent = Message.objects.filter(ticket=ticket, author_kind=AuthorKind.AGENT, is_public=True)
    assert list(agent.values_list("body", flat=True)) == ["Both orders have been delivered."]
    ticket.refresh_from_db()
    assert ticket.status == TicketStatus.WAITING_ON_CUSTOMER


class TwoCallsOneId:
    """A model of the user's own (AGENT_MODEL as a dotted path) with the same habit."""

    name = "two-calls-one-id"

    def complete(self, *, messages, tools, on_token=None):  # noqa: ANN001, ANN201
        if any(m["role"] == "tool" for m in messages):
            return ModelResponse(text="Found nothing on either.")
        calls = [ToolCallRequest("0", "search_help", '{"query": "returns"}'),
                 ToolCallRequest("0", "search_help", '{"query": "shipping"}')]  # fmt: skip
        return ModelResponse(text="", tool_calls=calls, usage=Usage(10, 5), finish_reason="tool_calls")


def test_any_models_calls_that_share_an_id_both_run():
    ticket, _ = ticket_services.ticket_open(customer=make_customer(), subject="Help", body="Returns and shipping?")

    outcome = advance(ticket.pk, model=TwoCallsOneId())

    assert outcome.state == RunStatus.COMPLETED, (outcome, AgentRun.objects.get(ticket=ticket).last_error)
    calls = list(ToolCall.objects.filter(ticket=ticket).order_by("index"))
    assert [(c.arguments["query"], c.status) for c in calls] == [
        ("returns", CallStatus.SUCCEEDED),
        ("shipping", CallStatus.SUCCEEDED),
    ]
    assert len({c.model_call_id for c in calls}) == 2


class CallsWithoutIds:
    """A model of the user's own that leaves its calls' ids out, as some model APIs have none."""

    name = "calls-without-ids"

    def __init__(self, missing: object) -> None:
        self.missing = missing

    def complete(self, *, messages, tools, on_token=None):  # noqa: ANN001, ANN201
        if any(m["role"] == "tool" for m in messages):
            return ModelResponse(text="Found nothing on either.")
        calls = [ToolCallRequest(self.missing, "search_help", '{"query": "returns"}'),  # type: ignore[arg-type]
                 ToolCallRequest(self.missing, "search_help", '{"query": "shipping"}')]  # type: ignore[arg-type]  # fmt: skip
        return ModelResponse(text="", tool_calls=calls, usage=Usage(10, 5), finish_reason="tool_calls")


@pytest.mark.parametrize("missing", ["", None], ids=["empty", "none"])
def test_calls_a_model_gives_no_id_each_run_under_an_id_of_their_own(missing):
    """As the OpenAI-compatible adapter gives a call a server sent without an id one of its own."""
    ticket, _ = ticket_services.ticket_open(customer=make_customer(), subject="Help", body="Returns and shipping?")

    outcome = advance(ticket.pk, model=CallsWithoutIds(missing))

    assert outcome.state == RunStatus.COMPLETED, (outcome, AgentRun.objects.get(ticket=ticket).last_error)
    calls = list(ToolCall.objects.filter(ticket=ticket).order_by("index"))
    assert [c.status for c in calls] == [CallStatus.SUCCEEDED] * 2
    assert len({c.model_call_id for c in calls}) == 2 and all(c.model_call_id for c in calls)
