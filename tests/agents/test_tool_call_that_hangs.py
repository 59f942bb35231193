"""A tool call that hangs is given up at AGENT_TOOL_TIMEOUT_SECONDS, by its replay policy.

A handler that blocked (a dependency that accepts and never answers, a lock, a custom tool's bug)
held the worker and the ticket's lease until Celery's soft time limit (600 s), while the customer
waited; under the solo pool nothing ended it at all. Now a call still running at the bound is
treated as failed (safe), as tried and settled by its idempotency key on the next pass (keyed), or
as uncertain and never repeated (never); the failure is counted like any other (backoff, parked
with a person at the limit), and the pass ends. The handler left running writes nothing to the
ledger after the bound, and starts no effect behind a fence.

The worker test at the end runs a real Celery worker process (solo pool: one task at a time): a
ticket whose tool hangs on every try is parked with a person, and the same worker answers another
customer meanwhile.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest

from agents.calls import CRASHED_PREFIX
from agents.llm import ModelResponse, ToolCallRequest, Usage
from agents.models import AgentProfile, AgentRun, CallStatus, ReplayPolicy, RunStatus, ToolCall
from agents.profiles import active_profile
from agents.runner import advance
from agents.services import PARKED_NOTE
from agents.tools import REGISTRY, Tool, ToolContext, message_key
from tests.agents.conftest import retry_time_comes
from tests.conftest import make_customer
from tickets import services as ticket_services
from tickets.models import AuthorKind, Message, TicketStatus

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(120)]

# How long a hanging handler of these tests takes before it goes on (to write, or to send): past the
# bound the tests set (1 s), and short enough for the code before the fix to get there too.
LATE = 6.0


class AsksFor:
    """A scripted model: asks for ``tool`` until one of its calls has succeeded (``every_step``: a new
    call at every step), then replies."""

    name = "asks-for"

    def __init__(self, tool: str, *, every_step: bool = False) -> None:
        self.tool, self.every_step, self.asked = tool, every_step, 0

    def complete(self, *, messages, tools, on_token=None):  # noqa: ANN001, ANN201
        results = [m for m in messages if m["role"] == "tool"]
        if results and not (self.every_step and all('"error"' in str(m.get("content")) for m in results)):
            return ModelResponse(text="All done on our side.")
        self.asked += 1
        call = ToolCallRequest(f"h{self.asked}", self.tool, "{}")
        return ModelResponse(text="", tool_calls=[call], usage=Usage(10, 5), finish_reason="tool_calls")


def register(monkeypatch: pytest.MonkeyPatch, tool: Tool) -> None:
    """A tool of one's own, registered and enabled on the active profile version."""
    monkeypatch.setitem(REGISTRY, tool.name, tool)
    profile = active_profile()
    tools = [t for t in profile.tools if t["name"] != tool.name]
    tools.append({"name": tool.name, "replay_policy": tool.replay_policy, "requires_approval": False})
    AgentProfile.objects.filter(pk=profile.pk).update(tools=tools)


def customer_asks_for(  # noqa: PLR0913
    monkeypatch: pytest.MonkeyPatch,
    name: str,
    description: str,
    policy: str,
    handler: Any,
    *,
    reconcile: Any = None,
    every_step: bool = False,
    subject: str,
    body: str,
) -> tuple[Any, AsksFor]:
    """A tool of one's own (``register``), and a customer's ticket whose model asks for it: (ticket, model)."""
    register(
        monkeypatch,
        Tool(
            name=name,
            description=description,
            parameters={"type": "object", "properties": {}},
            replay_policy=policy,
            handler=handler,
            reconcile=reconcile,
        ),
    )
    ticket, _ = ticket_services.ticket_open(customer=make_customer(), subject=subject, body=body)
    return ticket, AsksFor(name, every_step=every_step)


class Hangs:
    """A handler that hangs on its first call (for LATE seconds, then goes on to ``effect``) and
    answers at once after; records what each attempt ended with."""

    def __init__(self, effect) -> None:  # noqa: ANN001
        self.effect = effect
        self.calls = 0
        self.ended: list[str] = []
        self.first_done = threading.Event()

    def __call__(self, ctx: ToolContext, args: dict[str, Any]) -> dict[str, Any]:
        self.calls += 1
        first = self.calls == 1
        try:
            if first:
                threading.Event().wait(LATE)
            result = self.effect(ctx)
            self.ended.append("done")
            return result
        except BaseException as exc:
            self.ended.append(f"refused: {type(exc).__name__}")
            raise
        finally:
            if first:
                self.first_done.set()


def _note(ctx: ToolContext) -> dict[str, Any]:
    with ctx.fenced():
        ticket_services.message_post(
            ticket=ctx.ticket,
            author_kind=AuthorKind.AGENT,
            body="Pickup booked with the courier.",
            is_public=False,
            client_msg_id=message_key(ctx),
            actor_ref=ctx.actor_ref,
        )
    return {"booked": True}


def _reconcile_note(ctx: ToolContext, args: dict[str, Any]) -> dict[str, Any] | None:
    found = Message.objects.filter(ticket=ctx.ticket, client_msg_id=message_key(ctx)).exists()
    return {"booked": True} if found else None


def test_a_keyed_call_that_hangs_past_the_bound_is_settled_by_its_key_and_its_late_write_never_lands(
    monkeypatch, settings
):
    settings.AGENT_TOOL_TIMEOUT_SECONDS = 1.0
    handler = Hangs(_note)
    ticket, model = customer_asks_for(
        monkeypatch,
        "book_pickup",
        "Book a courier pickup.",
        ReplayPolicy.KEYED,
        handler,
        reconcile=_reconcile_note,
        subject="Return",
        body="Please collect it",
    )

    first = advance(ticket.pk, model=model)

    assert first.state == "retry", first
    call = ToolCall.objects.get(ticket=ticket, name="book_pickup")
    assert call.status == CallStatus.STARTED and call.error.startswith(CRASHED_PREFIX), (call.status, call.error)
    assert "AGENT_TOOL_TIMEOUT_SECONDS" in call.error
    assert AgentRun.objects.get(ticket=ticket).failures == 1
    # The handler left running goes on after the bound: what it writes is refused.
    assert handler.first_done.wait(LATE + 10)
    assert handler.ended[0].startswith("refused"), handler.ended
    assert not Message.objects.filter(ticket=ticket, client_msg_id=f"tool:{call.idempotency_key}").exists()

    retry_time_comes(ticket.pk)
    second = advance(ticket.pk, model=model)

    assert second.state == RunStatus.COMPLETED, second
    call.refresh_from_db()
    assert call.status == CallStatus.SUCCEEDED and call.attempts == 2, (call.status, call.attempts)
    notes = Message.objects.filter(ticket=ticket, client_msg_id=f"tool:{call.idempotency_key}")
    assert notes.count() == 1
    assert handler.calls == 2
    agent_words = Message.objects.filter(ticket=ticket, author_kind=AuthorKind.AGENT, is_public=True)
    assert list(agent_words.values_list("body", flat=True)) == ["All done on our side."]


def test_a_keyed_call_whose_effect_landed_before_the_bound_is_found_by_its_key_and_not_run_again(monkeypatch, settings):
    settings.AGENT_TOOL_TIMEOUT_SECONDS = 1.0
    written = threading.Event()

    def writes_then_hangs(ctx: ToolContext, args: dict[str, Any]) -> dict[str, Any]:
        if written.is_set():
            raise AssertionError("run again although its effect is recorded under its key")
        result = _note(ctx)
        written.set()
        threading.Event().wait(LATE)  # the answer never comes back in time
        return result

    ticket, model = customer_asks_for(
        monkeypatch,
        "book_pickup",
        "Book a courier pickup.",
        ReplayPolicy.KEYED,
        writes_then_hangs,
        reconcile=_reconcile_note,
        subject="Return",
        body="Please collect it",
    )

    assert advance(ticket.pk, model=model).state == "retry"
    retry_time_comes(ticket.pk)
    assert advance(ticket.pk, model=model).state == RunStatus.COMPLETED

    call = ToolCall.objects.get(ticket=ticket, name="book_pickup")
    assert call.status == CallStatus.SUCCEEDED and call.attempts == 1, (call.status, call.attempts)
    assert Message.objects.filter(ticket=ticket, client_msg_id=f"tool:{call.idempotency_key}").count() == 1


def test_a_never_call_that_hangs_is_uncertain_not_repeated_and_its_late_send_is_stopped(monkeypatch, settings):
    settings.AGENT_TOOL_TIMEOUT_SECONDS = 1.0
    sent: list[str] = []

    def send(ctx: ToolContext) -> dict[str, Any]:
        with ctx.fenced():
            pass  # still this worker's call (as the email tool asks before it sends)
        sent.append("text message")
        return {"sent": True}

    handler = Hangs(send)
    ticket, model = customer_asks_for(
        monkeypatch,
        "text_the_customer",
        "Send the customer a text message.",
        ReplayPolicy.NEVER,
        handler,
        subject="Hi",
        body="Text me the code",
    )

    assert advance(ticket.pk, model=model).state == "retry"

    call = ToolCall.objects.get(ticket=ticket, name="text_the_customer")
    assert call.status == CallStatus.UNCERTAIN and "AGENT_TOOL_TIMEOUT_SECONDS" in call.error, (call.status, call.error)
    assert handler.first_done.wait(LATE + 10)
    assert sent == [], "the handler given up at the bound sent its message all the same"

    retry_time_comes(ticket.pk)
    assert advance(ticket.pk, model=model).state == RunStatus.COMPLETED
    assert handler.calls == 1, "a call that may have taken effect (replay policy: never) was run again"


def test_a_safe_call_that_hangs_on_every_try_parks_the_ticket_with_a_person(monkeypatch, settings):
    settings.AGENT_TOOL_TIMEOUT_SECONDS = 1.0
    released = threading.Event()
    tries: list[int] = []

    def hangs(ctx: ToolContext, args: dict[str, Any]) -> dict[str, Any]:
        tries.append(1)
        released.wait(LATE)
        return {"stock": 3}

    settings.AGENT_MAX_CONSECUTIVE_FAILURES = 3
    ticket, model = customer_asks_for(
        monkeypatch,
        "check_stock",
        "Check the warehouse's stock.",
        ReplayPolicy.SAFE,
        hangs,
        every_step=True,
        subject="Stock",
        body="Is it in stock?",
    )

    states = []
    try:
        for _ in range(3):
            states.append(advance(ticket.pk, model=model).state)
            retry_time_comes(ticket.pk)
    finally:
        released.set()

    assert states == ["retry", "retry", "parked"], states
    calls = ToolCall.objects.filter(ticket=ticket, name="check_stock")
    assert [c.status for c in calls] == [CallStatus.FAILED] * 3
    assert all("AGENT_TOOL_TIMEOUT_SECONDS" in c.error for c in calls)
    ticket.refresh_from_db()
    assert ticket.status == TicketStatus.WITH_HUMAN
    public = Message.objects.filter(ticket=ticket, is_public=True).exclude(author_kind=AuthorKind.CUSTOMER)
    assert PARKED_NOTE in list(public.values_list("body", flat=True))
    asked = model.asked
    assert advance(ticket.pk, model=model).state != "retry" and model.asked == asked


def test_a_keyed_call_whose_look_up_under_its_key_hangs_fails_the_pass_and_is_not_run_again_blindly(
    monkeypatch, settings
):
    settings.AGENT_TOOL_TIMEOUT_SECONDS = 1.0
    runs: list[str] = []
    looked_up = threading.Event()

    def crashes_once(ctx: ToolContext, args: dict[str, Any]) -> dict[str, Any]:
        runs.append("run")
        if len(runs) == 1:
            raise RuntimeError("the courier's API dropped the connection")  # it may have booked it
        return _note(ctx)

    def look_up_hangs(ctx: ToolContext, args: dict[str, Any]) -> dict[str, Any] | None:
        looked_up.set()
        threading.Event().wait(LATE)  # the courier's API does not answer the look-up in time
        return None

    ticket, model = customer_asks_for(
        monkeypatch,
        "book_pickup",
        "Book a courier pickup.",
        ReplayPolicy.KEYED,
        crashes_once,
        reconcile=look_up_hangs,
        subject="Return",
        body="Please collect it",
    )
    assert advance(ticket.pk, model=model).state == "retry"
    retry_time_comes(ticket.pk)

    second = advance(ticket.pk, model=model)

    assert looked_up.is_set()
    assert second.state == "retry", second
    assert runs == ["run"], "run again although what happened under its key was never learnt"
    call = ToolCall.objects.get(ticket=ticket, name="book_pickup")
    assert call.status == CallStatus.STARTED and call.error.startswith(CRASHED_PREFIX)
    run = AgentRun.objects.get(ticket=ticket)
    assert run.failures == 2 and "AGENT_TOOL_TIMEOUT_SECONDS" in run.last_error, (run.failures, run.last_error)


@pytest.mark.usefixtures("quick_provider_retries")
def test_a_refund_whose_provider_answers_after_the_bound_is_settled_by_its_key_and_paid_once(sandbox, settings):
    from agents.models import Refund, RefundStatus
    from tests.agents.test_money_path import assert_money_invariants, order_for, paid
    from tests.workers import wait_until

    settings.AGENT_TOOL_TIMEOUT_SECONDS = 1.0
    customer = make_customer()
    order = order_for(customer, "PH-4401", 5000, sandbox)
    sandbox.fault("latency:4000")  # the provider pays, and answers seconds after the bound
    ticket, _ = ticket_services.ticket_open(
        customer=customer, subject="Broken", body="Please refund order PH-4401, it arrived broken."
    )

    assert advance(ticket.pk).state == "retry"

    (refund,) = Refund.objects.filter(ticket=ticket)
    wait_until(lambda: paid(sandbox, order), timeout=30, what="the provider to pay the refund")
    call = ToolCall.objects.get(ticket=ticket, name="issue_refund")
    assert call.status == CallStatus.STARTED and "AGENT_TOOL_TIMEOUT_SECONDS" in call.error, (call.status, call.error)
    retry_time_comes(ticket.pk)
    assert advance(ticket.pk).state == RunStatus.COMPLETED

    refund.refresh_from_db()
    assert refund.status == RefundStatus.SUCCEEDED, (refund.status, refund.error)
    assert [r["metadata"]["idempotency_key"] for r in paid(sandbox, order)] == [call.idempotency_key]
    call.refresh_from_db()
    assert call.status == CallStatus.SUCCEEDED and call.attempts == 1, (call.status, call.attempts)
    assert_money_invariants(sandbox)


# --- With a real worker process -------------------------------------------------------------------


def _hangs_for_minutes(ctx: ToolContext, args: dict[str, Any]) -> dict[str, Any]:
    threading.Event().wait(300)  # a warehouse system that accepts the request and never answers
    return {"stock": 3}


HANGING = Tool(
    name="check_warehouse_stock",
    description="Ask the warehouse how many are in stock.",
    parameters={"type": "object", "properties": {}},
    replay_policy=ReplayPolicy.SAFE,
    handler=_hangs_for_minutes,
)


class StockOrHello:
    """The model of the worker test (AGENT profile ``model``: built in the worker process, where it
    registers the warehouse tool): asks the warehouse about stock at every step, greets otherwise."""

    name = "stock-or-hello"

    def __init__(self) -> None:
        REGISTRY.setdefault(HANGING.name, HANGING)

    def complete(self, *, messages, tools, on_token=None):  # noqa: ANN001, ANN201
        asked = " ".join(str(m.get("content")) for m in messages if m["role"] == "user")
        if "stock" not in asked:
            return ModelResponse(text="Hello! How can I help?", usage=Usage(5, 5))
        step = sum(1 for m in messages if m["role"] == "assistant")
        call = ToolCallRequest(f"w{step}", HANGING.name, "{}")
        return ModelResponse(text="", tool_calls=[call], usage=Usage(10, 5), finish_reason="tool_calls")


@pytest.mark.workers
@pytest.mark.timeout(240)
def test_a_tool_that_hangs_on_every_try_parks_its_ticket_and_the_worker_answers_others_meanwhile(cluster):
    from tests.workers import wait_until

    profile = active_profile()
    tools = [*profile.tools, {"name": HANGING.name, "replay_policy": ReplayPolicy.SAFE, "requires_approval": False}]
    AgentProfile.objects.filter(pk=profile.pk).update(model=f"{__name__}.StockOrHello", tools=tools)
    # solo pool: one task at a time; a bound of 2 s is above a refund's tries only with a provider this quick
    cluster.worker(AGENT_TOOL_TIMEOUT_SECONDS="2", PAYMENTS_TIMEOUT_SECONDS="0.5", REFUND_PROVIDER_ATTEMPTS="1")
    cluster.beat()

    stuck, _ = ticket_services.ticket_open(customer=make_customer(), subject="Stock", body="Is the lamp in stock?")
    wait_until(
        lambda: ToolCall.objects.filter(ticket=stuck).exists(), timeout=60, what="the warehouse asked", cluster=cluster
    )
    other, _ = ticket_services.ticket_open(customer=make_customer(), subject="Hi", body="Hello there")

    def agent_words(ticket) -> list[str]:  # noqa: ANN001
        public = Message.objects.filter(ticket=ticket, is_public=True).exclude(author_kind=AuthorKind.CUSTOMER)
        return list(public.values_list("body", flat=True))

    wait_until(lambda: agent_words(other), timeout=90, what="the other customer answered", cluster=cluster)
    wait_until(lambda: PARKED_NOTE in agent_words(stuck), timeout=90, what="the stuck ticket parked", cluster=cluster)
    assert agent_words(other) == ["Hello! How can I help?"]
    stuck.refresh_from_db()
    assert stuck.status == TicketStatus.WITH_HUMAN
    calls = list(ToolCall.objects.filter(ticket=stuck).order_by("pk"))
    assert [c.status for c in calls] == [CallStatus.FAILED] * 3, [(c.status, c.error) for c in calls]
    assert all("AGENT_TOOL_TIMEOUT_SECONDS" in c.error for c in calls)
    assert AgentRun.objects.get(ticket=stuck).status == RunStatus.FAILED
