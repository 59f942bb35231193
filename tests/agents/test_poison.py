"""Never stuck: poison model output and failing tools end with a person, never in a loop.

A hostile model (the same shape a class behind AGENT_MODEL has) answers with
what crashed the loop before: over-long replies, NUL characters, lone
surrogates, tool names that are not strings, call ids that are too long, 200
tool calls in one step. Each failure is recorded on the run and counted; after
AGENT_MAX_CONSECUTIVE_FAILURES in a row the ticket is parked with a person, the
customer is told plainly, the sweeper leaves it alone and the model is not
called again.
"""

from __future__ import annotations

import json

import pytest
from django.db import connection

from agents.llm import ModelResponse, ToolCallRequest, Usage
from agents.models import AgentRun, CallStatus, ModelStep, ReplayPolicy, RunStatus, StepStatus, ToolCall
from agents.runner import advance
from agents.selectors import tickets_with_agent_work
from agents.services import PARKED_NOTE
from agents.tools import REGISTRY, Tool
from tests.agents.conftest import retry_time_comes
from tests.conftest import make_customer
from tickets import services as ticket_services
from tickets.models import AuthorKind, Message, Ticket, TicketStatus

pytestmark = pytest.mark.django_db(transaction=True)


class Hostile:
    """Answers every request with the same response; counts how often it was asked."""

    name = "hostile"

    def __init__(self, response: ModelResponse) -> None:
        self.response = response
        self.calls = 0

    def complete(self, *, messages, tools, on_token=None):  # noqa: ANN001
        self.calls += 1
        return self.response


def open_ticket(body: str = "Hello, I need help") -> Ticket:
    ticket, _ = ticket_services.ticket_open(customer=make_customer(), subject="Help", body=body)
    return ticket


def drive_until_at_rest(ticket: Ticket, model, *, passes: int = 10) -> list[str]:  # noqa: ANN001
    """Advance as the task and the sweeper would: a retry the task scheduled comes when its wait is
    over (the wait is moved to now rather than slept through)."""
    states = []
    for _ in range(passes):
        outcome = advance(ticket.pk, model=model)
        states.append(outcome.state)
        if outcome.state != "retry":
            break
        retry_time_comes(ticket.pk)
    return states


def assert_parked(ticket: Ticket, model: Hostile, *, error: str) -> None:
    ticket.refresh_from_db()
    assert ticket.status == TicketStatus.WITH_HUMAN
    run = AgentRun.objects.get(ticket=ticket)
    assert run.status == RunStatus.FAILED and run.failures == 3 and error in run.last_error
    note = Message.objects.get(ticket=ticket, is_public=False, client_msg_id=f"parked-note:{run.pk}")
    assert error in note.body
    public = list(Message.objects.filter(ticket=ticket, is_public=True).exclude(author_kind=AuthorKind.CUSTOMER))
    assert [m.body for m in public] == [PARKED_NOTE]
    assert ticket.events.filter(kind="agent_parked").count() == 1
    assert ticket.events.filter(kind="agent_step_failed").count() == 3
    # The sweeper leaves it alone, and nothing calls the model again.
    assert ticket.pk not in tickets_with_agent_work()
    asked = model.calls
    assert advance(ticket.pk, model=model).state == "idle"
    assert model.calls == asked


def calls(*requests: ToolCallRequest) -> ModelResponse:
    return ModelResponse(text="", tool_calls=list(requests), usage=Usage(10, 5), finish_reason="tool_calls")


POISON = {
    "a reply too long to accept": (ModelResponse(text="word " * 5000), "the reply has 25000 characters"),
    "a NUL in a tool name": (calls(ToolCallRequest("c1", "lookup\x00order", "{}")), "control characters"),
    "a tool name that is not a string": (calls(ToolCallRequest("c1", 42, "{}")), "name is int, not a string"),  # type: ignore[arg-type]
    "a call id over 100 characters": (calls(ToolCallRequest("c" * 150, "list_orders", "{}")), "150 characters"),
    "200 tool calls in one step": (
        calls(*(ToolCallRequest(f"c{n}", "list_orders", "{}") for n in range(200))),
        "200 tool calls in one step",
    ),
    "an empty answer": (ModelResponse(text=""), "the answer has no text and asks for no tool call"),
    "an answer of blanks": (ModelResponse(text=" \n\t "), "the answer has no text and asks for no tool call"),
    "an answer of only NULs": (ModelResponse(text="\x00\x00"), "the answer has no text and asks for no tool call"),
    # Characters no one sees (zero-width, byte-order marks, blank-looking letters): posted, they were the
    # run's answer, and the customer waited on an empty bubble with the ticket marked as answered.
    "an answer of invisible characters": (
        ModelResponse(text="\u200b \ufeff\u200c\u2060\u2800\u3164\n"),
        "the answer has no text and asks for no tool call",
    ),
    "an answer cut off at the token limit": (
        ModelResponse(text="Your refund will reach the card you paid with within", finish_reason="length"),
        "the answer was cut off (finish_reason 'length')",
    ),
    "tool arguments cut off by a filter": (
        ModelResponse(
            text="", tool_calls=[ToolCallRequest("c1", "search_help", '{"query": "ref')], finish_reason="content_filter"
        ),
        "the answer was cut off (finish_reason 'content_filter')",
    ),
    "a NUL in tool arguments": (
        calls(ToolCallRequest("c1", "search_help", '{"query": "a\x00b"}')),
        "arguments contain NUL",
    ),
}


@pytest.mark.parametrize("case", list(POISON), ids=list(POISON))
def test_poison_output_parks_the_ticket_with_a_person_after_three_failures(case, settings):
    settings.AGENT_MAX_REPLY_CHARS = 16000
    response, error = POISON[case]
    ticket = open_ticket()
    model = Hostile(response)

    states = drive_until_at_rest(ticket, model)

    assert states == ["retry", "retry", "parked"]
    assert model.calls == 3
    assert_parked(ticket, model, error=error)
    failed = ModelStep.objects.filter(ticket=ticket, status=StepStatus.FAILED)
    assert failed.count() == 3 and all(error in step.error for step in failed)
    assert not ToolCall.objects.filter(ticket=ticket).exists()  # nothing of a poison answer is acted on


def test_a_long_reply_within_the_limit_is_posted_whole_as_several_messages():
    paragraphs = [f"Paragraph {n}: " + "all about your order. " * 60 for n in range(10)]
    text = "\n\n".join(paragraphs)
    assert len(text) > 3 * ticket_services.MESSAGE_MAX_CHARS
    ticket = open_ticket()

    assert advance(ticket.pk, model=Hostile(ModelResponse(text=text))).state == RunStatus.COMPLETED

    parts = list(
        Message.objects.filter(ticket=ticket, author_kind=AuthorKind.AGENT)
        .order_by("id")
        .values_list("body", flat=True)
    )
    assert len(parts) >= 4 and all(len(p) <= ticket_services.MESSAGE_MAX_CHARS for p in parts)
    assert "".join(p.replace(" ", "").replace("\n", "") for p in parts) == text.replace(" ", "").replace("\n", "")


def test_nul_characters_and_lone_surrogates_in_a_reply_are_dropped_not_fatal():
    ticket = open_ticket()

    outcome = advance(ticket.pk, model=Hostile(ModelResponse(text="Hello\x00 there \ud800friend")))

    assert outcome.state == RunStatus.COMPLETED
    reply = Message.objects.get(ticket=ticket, author_kind=AuthorKind.AGENT)
    assert reply.body == "Hello there \ufffdfriend"


@pytest.mark.parametrize(
    "usage",
    [Usage(-(10**6), 0), Usage(10**12, 5), Usage(0, -1), Usage(1.5, 2), Usage("12", 3), Usage(None, None)],  # type: ignore[arg-type]
    ids=["negative", "beyond-a-column", "negative-completion", "a-float", "a-string", "none"],
)
def test_token_counts_no_step_can_hold_are_estimated_not_fatal(usage):
    """A server's usage is its own word: counts that are negative, not whole numbers or beyond what a
    step's column holds are read as unreported and estimated, so a good answer is posted, not thrown
    away three times and the ticket parked."""
    ticket = open_ticket()

    outcome = advance(ticket.pk, model=Hostile(ModelResponse(text="Hi there, your order ships today.", usage=usage)))

    assert outcome.state == RunStatus.COMPLETED
    assert Message.objects.get(ticket=ticket, author_kind=AuthorKind.AGENT).body == "Hi there, your order ships today."
    step = ModelStep.objects.get(run__ticket=ticket)
    assert 0 < step.completion_tokens < 100 and 0 <= step.prompt_tokens < 10**6


def crashing_tool(raising: Exception, replay_policy: str = ReplayPolicy.SAFE) -> Tool:
    def handler(ctx, args):  # noqa: ANN001, ANN202
        if isinstance(raising, str):
            with connection.cursor() as cursor:
                cursor.execute(raising)
        raise raising

    return Tool(
        name="crashy",
        description="A tool that always fails.",
        parameters={"type": "object", "properties": {}, "additionalProperties": False},
        replay_policy=replay_policy,
        handler=handler,
    )


class CallsCrashy:
    name = "calls-crashy"

    def __init__(self) -> None:
        self.calls = 0

    def complete(self, *, messages, tools, on_token=None):  # noqa: ANN001
        self.calls += 1
        return calls(ToolCallRequest(f"c{self.calls}", "crashy", "{}"))


@pytest.mark.parametrize(
    "raising", [RuntimeError("the disk is full"), "SELECT 1/0"], ids=["tool-raises", "database-error"]
)
def test_a_tool_that_keeps_failing_parks_the_ticket(raising, monkeypatch):
    monkeypatch.setitem(REGISTRY, "crashy", crashing_tool(raising))
    ticket = open_ticket()
    model = CallsCrashy()

    states = drive_until_at_rest(ticket, model)

    assert states == ["retry", "retry", "parked"]
    failed = ToolCall.objects.filter(ticket=ticket, name="crashy")
    assert failed.count() == 3 and all(c.status == CallStatus.FAILED for c in failed)
    error = "the disk is full" if isinstance(raising, Exception) else "division by zero"
    assert_parked(ticket, model, error=error)


def test_a_keyed_tool_that_keeps_crashing_is_reconciled_each_time_and_parks_the_ticket(monkeypatch):
    """A keyed call that crashes stays started (its effect may have happened): each pass reconciles it
    and runs it again under the same key; the failures are counted, and the ticket is parked."""
    monkeypatch.setitem(REGISTRY, "crashy", crashing_tool(RuntimeError("the disk is full"), ReplayPolicy.KEYED))
    ticket = open_ticket()
    model = CallsCrashy()

    states = drive_until_at_rest(ticket, model)

    assert states == ["retry", "retry", "parked"]
    (call,) = ToolCall.objects.filter(ticket=ticket, name="crashy")  # one intent, tried again under its key
    assert call.status != CallStatus.SUCCEEDED
    assert_parked(ticket, model, error="the disk is full")


def test_a_failure_between_successes_is_not_counted_in_a_row(monkeypatch):
    """Progress resets the count: a flaky tool that succeeds in between never parks the ticket."""
    attempts = {"n": 0}

    def flaky(ctx, args):  # noqa: ANN001, ANN202
        attempts["n"] += 1
        if attempts["n"] % 2:
            raise RuntimeError("flaky")
        return {"ok": True}

    monkeypatch.setitem(
        REGISTRY,
        "flaky",
        Tool(name="flaky", description="", parameters={"type": "object"}, replay_policy="safe", handler=flaky),
    )

    class CallsFlakyFiveTimes:
        name = "flaky-five"

        def complete(self, *, messages, tools, on_token=None):  # noqa: ANN001
            done = sum(1 for m in messages if m["role"] == "tool")
            if done < 5:
                return calls(ToolCallRequest(f"f{done}", "flaky", "{}"))
            return ModelResponse(text="All done.")

    ticket = open_ticket()
    states = drive_until_at_rest(ticket, CallsFlakyFiveTimes())

    assert states[-1] == RunStatus.COMPLETED and "parked" not in states
    assert AgentRun.objects.get(ticket=ticket).status == RunStatus.COMPLETED


def test_a_parked_ticket_handed_back_is_answered_again(settings):
    ticket = open_ticket("Where is my order?")
    drive_until_at_rest(ticket, Hostile(calls(ToolCallRequest("c1", 7, "{}"))))  # type: ignore[arg-type]
    ticket.refresh_from_db()
    assert ticket.status == TicketStatus.WITH_HUMAN

    ticket_services.ticket_transition(ticket=ticket, to_status=TicketStatus.OPEN, actor_kind="staff")
    outcome = advance(ticket.pk, model=Hostile(ModelResponse(text="Sorry for the wait: here is your answer.")))

    assert outcome.state == RunStatus.COMPLETED
    runs = list(AgentRun.objects.filter(ticket=ticket).order_by("id"))
    assert [r.status for r in runs] == [RunStatus.FAILED, RunStatus.COMPLETED]
    assert runs[1].input_message_ids == runs[0].input_message_ids  # the unanswered question, answered
    assert Message.objects.filter(ticket=ticket, author_kind=AuthorKind.AGENT).count() == 1


def test_failed_steps_count_against_the_step_limit(settings):
    settings.AGENT_MAX_CONSECUTIVE_FAILURES = 100
    settings.AGENT_MAX_STEPS = 4
    ticket = open_ticket()
    model = Hostile(ModelResponse(text="x" * 20000))

    states = drive_until_at_rest(ticket, model, passes=20)

    assert states[-1] == RunStatus.HANDED_OFF and model.calls == 4
    assert "step limit" in Message.objects.get(ticket=ticket, is_public=False).body


def test_poison_arguments_escaped_in_json_become_an_error_the_model_sees():
    ticket = open_ticket()

    class EscapedNul:
        name = "escaped-nul"

        def complete(self, *, messages, tools, on_token=None):  # noqa: ANN001
            if any(m["role"] == "tool" for m in messages):
                return ModelResponse(text="Done.")
            args = json.dumps({"query": "a\x00b"})  # "\\u0000" in the JSON text: valid JSON, unstorable value
            return calls(ToolCallRequest("c1", "search_help", args))

    assert advance(ticket.pk, model=EscapedNul()).state == RunStatus.COMPLETED
    call = ToolCall.objects.get(ticket=ticket)
    assert call.status == CallStatus.FAILED and "NUL" in call.error


def test_arguments_nested_deeper_than_can_be_stored_are_told_to_the_model_as_such():
    """An object nested 900 deep (valid JSON Python reads) was refused to the model as holding "NUL
    characters or invalid Unicode", which it does not: the model was told to fix what was not wrong."""
    ticket = open_ticket()

    class Nested:
        name = "nested"

        def complete(self, *, messages, tools, on_token=None):  # noqa: ANN001
            if any(m["role"] == "tool" for m in messages):
                return ModelResponse(text="Done.")
            return calls(ToolCallRequest("c1", "search_help", '{"query": ' + "[" * 900 + "]" * 900 + "}"))

    assert advance(ticket.pk, model=Nested()).state == RunStatus.COMPLETED
    call = ToolCall.objects.get(ticket=ticket)
    assert call.status == CallStatus.FAILED and "nested too deeply" in call.error, call.error
