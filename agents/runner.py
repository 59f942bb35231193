"""The agent loop: ``advance(ticket_id)``, run by the ``agents.advance_ticket`` task.

Idempotent; any number of duplicate or concurrent deliveries are harmless:

1. take the ticket's lease or return (someone else has it);
2. load the ticket's state from Postgres;
3. resolve unfinished calls by their replay policy (recovery), apply decisions;
4. loop: ask the model (streaming), store the step, run the tool calls it
   asked for (intent, effect, outcome), until it replies, a call needs an
   approval (pause), the ticket goes to a person, or a budget is hit;
5. release the lease; if new input arrived meanwhile, ring again.
"""

from __future__ import annotations

import logging
import random
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.db import connection

from agents import faults
from agents import services as agent_services
from agents.approval import apply_decision, may_execute, pause_for_approval
from agents.conversation import build_conversation
from agents.lease import Lease, LeaseLost, lease_acquire, worker_identity
from agents.llm import ChatModel, ModelError, validate_response
from agents.model_factory import get_model
from agents.models import (
    ACTIVE_RUN_STATUSES,
    FINAL_CALL_STATUSES,
    AgentRun,
    CallStatus,
    ModelStep,
    ReplayPolicy,
    RunStatus,
    StepStatus,
    ToolCall,
)
from agents.policy import approval_reason
from agents.selectors import tickets_with_agent_work
from agents.tools import (
    REGISTRY,
    Tool,
    ToolContext,
    ToolError,
    ToolEscalation,
    ToolUncertain,
    parse_arguments,
    tool_specs,
)
from tickets import realtime
from tickets.models import Ticket, TicketStatus

logger = logging.getLogger(__name__)

# Ticket statuses in which the agent does not act (a person has it, or it is closed).
AGENT_STAYS_OUT = (TicketStatus.WITH_HUMAN, TicketStatus.CLOSED)


def max_steps() -> int:
    return int(getattr(settings, "AGENT_MAX_STEPS", 16))


def token_budget() -> int:
    return int(getattr(settings, "AGENT_TOKEN_BUDGET", 200_000))


def max_failures() -> int:
    """Failures in a row (of any kind) before the ticket is parked with a person."""
    return max(1, int(getattr(settings, "AGENT_MAX_CONSECUTIVE_FAILURES", 3)))


def retry_delay(failures: int, retry_after: float | None = None) -> float:
    """Exponential backoff with jitter, at least what the server asked for, at most a minute."""
    delay = min(60.0, 2.0**failures) * random.uniform(0.5, 1.0)
    if retry_after is not None:
        delay = max(delay, min(float(retry_after), 300.0))
    return round(delay, 3)


@dataclass
class Outcome:
    """What one ``advance`` did; returned by the task for logs and tests."""

    state: str
    runs: int = 0
    retry_in: float | None = None
    # Work is waiting that this call did not take (a message came in as it finished): ring again.
    more_work: bool = False


class RetryLater(Exception):
    def __init__(self, seconds: float) -> None:
        super().__init__(seconds)
        self.seconds = seconds


def advance(ticket_id: int, *, model: ChatModel | None = None) -> Outcome:
    if not Ticket.objects.filter(pk=ticket_id).exists():
        return Outcome("missing")
    lease = lease_acquire(ticket_id=ticket_id, owner=worker_identity())
    if lease is None:
        return Outcome("busy")
    lease.start_heartbeat()
    outcome = Outcome("idle")
    try:
        model = model or get_model()
        for _ in range(20):  # bounded: each pass finishes or pauses a run
            run = _current_run(lease, model)
            if run is None:
                break
            outcome.runs += 1
            try:
                state = _drive(lease, run, model)
            except (LeaseLost, RetryLater, _Stop):
                raise
            except Exception as exc:  # noqa: BLE001 - every failure is recorded and counted, none loops
                state = _failed(lease, run, exc)
            outcome.state = state
            if state != RunStatus.COMPLETED:
                break
    except LeaseLost:
        logger.warning("ticket %s: lease lost (epoch %s); another worker carries on", ticket_id, lease.epoch)
        return Outcome("lease_lost", outcome.runs)
    except RetryLater as retry:
        outcome = Outcome("retry", outcome.runs, retry_in=retry.seconds)
    except _Stop:
        outcome.state = RunStatus.HANDED_OFF
    finally:
        faults.hit("before_lease_release")
        lease.stop_heartbeat()
        if not lease.lost:
            lease.release()
        else:
            lease.unlock()
    # New input that arrived while we held the lease: the task rings again (DESIGN.md, the loop, step 5).
    outcome.more_work = outcome.retry_in is None and has_pending_work(ticket_id)
    return outcome


def has_pending_work(ticket_id: int) -> bool:
    """Is there something for the agent to do on this ticket, with nobody holding its lease?"""
    return bool(tickets_with_agent_work(ticket_id=ticket_id))


def _current_run(lease: Lease, model: ChatModel) -> AgentRun | None:
    run = AgentRun.objects.filter(ticket_id=lease.ticket_id, status__in=ACTIVE_RUN_STATUSES).first()
    if run is not None:
        if run.status == RunStatus.WAITING_APPROVAL:
            decided = ToolCall.objects.filter(
                run=run, status=CallStatus.AWAITING_APPROVAL, approval_decision__isnull=False
            ).exists()
            if not decided:
                # Paused: nothing but rows until a decision rings the doorbell. A customer
                # who writes meanwhile is told so once; the run answers them after the decision.
                agent_services.acknowledge_while_paused(lease=lease, run=run)
                return None
            agent_services.run_transition(lease=lease, run=run, to_status=RunStatus.RUNNING, outcome="resumed")
        return run
    ticket = Ticket.objects.get(pk=lease.ticket_id)
    if ticket.status in AGENT_STAYS_OUT:
        return None
    return agent_services.run_start(lease=lease, ticket=ticket, model_name=model.name)


# --- recovery ---------------------------------------------------------------------------


def _recover(lease: Lease, run: AgentRun) -> None:
    """Resolve what a dead worker left behind, by policy; note it for the model.

    A run taken up after a clean stop (a pause for approval, a model retry) is not
    a recovery: only a lease taken from an owner that never released it is.
    """
    resumed = bool(lease.took_over_from) and bool(run.epochs) and lease.epoch not in run.epochs
    found: dict[str, list[dict[str, Any]]] = {"interrupted_steps": [], "rerun": [], "reconciled": [], "uncertain": []}

    for step in ModelStep.objects.filter(run=run, status=StepStatus.STARTED):
        streamed = realtime.stream_text(run.ticket_id, step.pk)
        wasted = max(1, len(streamed) // 4) if streamed else 0
        agent_services.step_fail(
            lease=lease, step=step, error="interrupted; generated again", status=StepStatus.INTERRUPTED, wasted=wasted
        )
        realtime.stream_finished(run.ticket_id, step.pk)
        found["interrupted_steps"].append({"step": step.index, "wasted_tokens": wasted})

    ticket = Ticket.objects.select_related("customer").get(pk=run.ticket_id)
    for call in ToolCall.objects.filter(run=run, status=CallStatus.STARTED).order_by("step__index", "index"):
        tool = REGISTRY.get(call.name)
        ctx = ToolContext(ticket=ticket, call=call)
        entry = {"tool": call.name, "arguments": call.arguments, "idempotency_key": call.idempotency_key}
        if tool is not None and not may_execute(call):
            # Never runs without its approval, whatever left it started: ask for it (again).
            pause_for_approval(lease=lease, run=run, call=call, reason=call.approval_reason or "needs a staff approval")
            break
        if tool is None or call.replay_policy == ReplayPolicy.NEVER:
            agent_services.call_finish(
                lease=lease,
                call=call,
                status=CallStatus.UNCERTAIN,
                result={"status": "uncertain", "note": "The worker stopped during this call; it may have happened."},
                error="interrupted; not repeated automatically (replay policy: never)",
            )
            found["uncertain"].append(entry)
        elif call.replay_policy == ReplayPolicy.KEYED and tool.reconcile is not None:
            proven = tool.reconcile(ctx, call.arguments)
            if proven is not None:
                agent_services.call_finish(lease=lease, call=call, status=CallStatus.SUCCEEDED, result=proven)
                found["reconciled"].append(entry)
            else:
                _execute(lease, call, tool, ctx, again=True)
                found["rerun"].append(entry)
        else:
            # safe: run it again; keyed without a reconcile hook: retry under the same key.
            _execute(lease, call, tool, ctx, again=True)
            found["rerun"].append(entry)

    note = _recovery_note(run, found) if resumed or any(found.values()) else None
    agent_services.run_note_resume(lease=lease, run=run, note=note)


def _recovery_note(run: AgentRun, found: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    calls = list(ToolCall.objects.filter(run=run).order_by("step__index", "index"))
    completed = [c.name for c in calls if c.status == CallStatus.SUCCEEDED]
    failed = [c.name for c in calls if c.status == CallStatus.FAILED]
    uncertain = [c.name for c in calls if c.status == CallStatus.UNCERTAIN]
    lines = [
        "RECOVERY NOTE: the previous worker on this ticket stopped before finishing. "
        "Steps already completed were kept and are not generated again.",
        f"Calls completed: {', '.join(completed) or 'none'}.",
        f"Calls failed: {', '.join(failed) or 'none'}.",
        f"Calls that may have taken effect (uncertain): {', '.join(uncertain) or 'none'}.",
    ]
    if uncertain:
        lines.append(
            "Before repeating an uncertain action, check the real state (look it up, or ask the customer); "
            "do not repeat it blindly."
        )
    return {"text": "\n".join(lines), **found}


# --- driving a run ----------------------------------------------------------------------


def _drive(lease: Lease, run: AgentRun, model: ChatModel) -> str:
    _recover(lease, run)
    if Ticket.objects.filter(pk=run.ticket_id, status__in=AGENT_STAYS_OUT).exists():
        # A person took the ticket over (or closed it) while this run was unfinished.
        agent_services.run_transition(
            lease=lease, run=run, to_status=RunStatus.HANDED_OFF, outcome="a person took the ticket over"
        )
        return RunStatus.HANDED_OFF
    while True:
        steps = list(ModelStep.objects.filter(run=run, status=StepStatus.COMPLETED).order_by("index"))
        last = steps[-1] if steps else None
        if last is not None and last.tool_calls:
            state = _run_calls(lease, run, last)
            if state is not None:
                return state
        elif last is not None:
            if last.response_text.strip():
                agent_services.reply_post(lease=lease, run=run, step=last)
            agent_services.run_transition(lease=lease, run=run, to_status=RunStatus.COMPLETED, outcome="replied")
            return RunStatus.COMPLETED

        if ModelStep.objects.filter(run=run).count() >= max_steps():  # every model call counts, failed ones too
            agent_services.hand_off(lease=lease, run=run, reason=f"step limit reached ({max_steps()} steps)")
            return RunStatus.HANDED_OFF
        if agent_services.ticket_tokens_used(ticket_id=run.ticket_id) >= token_budget():
            agent_services.hand_off(lease=lease, run=run, reason=f"token budget reached ({token_budget()} tokens)")
            return RunStatus.HANDED_OFF
        _ask_model(lease, run, model, index=len(steps))


def _ask_model(lease: Lease, run: AgentRun, model: ChatModel, *, index: int) -> None:
    messages = build_conversation(run)
    step = agent_services.step_start(lease=lease, run=run, index=index, model_name=model.name, messages=messages)
    offset = 0

    def on_token(text: str) -> None:
        nonlocal offset
        realtime.stream_token(run.ticket_id, step.pk, offset, text)
        offset += len(text)
        faults.hit("mid_stream")

    try:
        response = validate_response(model.complete(messages=messages, tools=tool_specs(), on_token=on_token))
    except ModelError as exc:
        streamed = realtime.stream_text(run.ticket_id, step.pk)
        wasted = exc.usage.total_tokens if exc.usage is not None else 0
        agent_services.step_fail(lease=lease, step=step, error=str(exc), wasted=max(wasted, len(streamed) // 4))
        realtime.stream_finished(run.ticket_id, step.pk)
        raise  # counted by _failed
    agent_services.step_complete(lease=lease, step=step, response=response)
    realtime.stream_finished(run.ticket_id, step.pk)
    faults.hit("after_step_stored")


class _Stop(Exception):
    pass


class _ToolCrashed(Exception):
    """A tool raised something other than a ToolError; its call is recorded as failed."""


def _failed(lease: Lease, run: AgentRun, exc: Exception) -> str:
    """Record a failed step on the run; park the ticket with a person after too many in a row,
    else try again after a backoff. Returns the run's state, or raises RetryLater."""
    if isinstance(exc, ModelError):
        error = f"the model could not answer: {exc}"
    elif isinstance(exc, _ToolCrashed):
        error = str(exc)
    else:
        logger.exception("ticket %s: the agent's step failed", run.ticket_id)
        error = f"{type(exc).__name__}: {exc}"
    # A database error may have left the connection unusable; the next query opens a new one.
    connection.close_if_unusable_or_obsolete()
    failures = agent_services.run_record_failure(lease=lease, run=run, error=error)
    permanent = isinstance(exc, ModelError) and not exc.retryable
    if permanent or failures >= max_failures():
        agent_services.park(lease=lease, run=run, error=error, failures=failures)
        return "parked"
    delay = retry_delay(failures, getattr(exc, "retry_after", None))
    agent_services.run_retry_after(lease=lease, run=run, seconds=delay)
    raise RetryLater(delay) from exc


def _run_calls(lease: Lease, run: AgentRun, step: ModelStep) -> str | None:
    """Run the calls a completed step asked for. Returns a run state to stop at, or None to go on."""
    ticket = Ticket.objects.select_related("customer").get(pk=run.ticket_id)
    existing = {c.index: c for c in ToolCall.objects.filter(step=step)}
    for index, requested in enumerate(step.tool_calls):
        call = existing.get(index)
        if call is None:
            call = _record_intent(lease, run, step, index, requested, ticket)
            faults.hit("after_call_started")
        if call.status in FINAL_CALL_STATUSES:
            if _ends_turn(call):
                agent_services.run_transition(lease=lease, run=run, to_status=RunStatus.HANDED_OFF, outcome=call.name)
                return RunStatus.HANDED_OFF
            continue
        if call.status == CallStatus.AWAITING_APPROVAL:
            state = apply_decision(lease=lease, run=run, call=call, ticket=ticket, execute=_execute)
            if state is not None:
                return state
        else:
            _execute(lease, call, REGISTRY[call.name], ToolContext(ticket=ticket, call=call))
        call.refresh_from_db()
        if run.failures and call.status == CallStatus.SUCCEEDED:
            agent_services.run_reset_failures(lease=lease, run=run)  # progress: the failures were not in a row
        if _ends_turn(call):
            agent_services.run_transition(lease=lease, run=run, to_status=RunStatus.HANDED_OFF, outcome=call.name)
            return RunStatus.HANDED_OFF
    return None


def _record_intent(
    lease: Lease, run: AgentRun, step: ModelStep, index: int, requested: dict[str, Any], ticket: Ticket
) -> ToolCall:
    """Commit the call's intent in one transaction with everything decided about it before it runs:
    its arguments checked, the business rules checked, whether it needs a staff approval, and, if it
    does, the pause and the approval request (DESIGN.md, invariant 11). Nothing has run yet."""
    common = {"lease": lease, "run": run, "step": step, "index": index, "model_call_id": requested["id"]}
    with lease.guard():
        try:
            tool, args = parse_arguments(requested["name"], requested["arguments"])
        except ToolError as exc:
            call = agent_services.call_start(
                **common,
                name=str(requested["name"])[:100],
                arguments={"raw": str(requested["arguments"])[:2000]},
                replay_policy=ReplayPolicy.SAFE,
                public_label="",
            )
            return agent_services.call_finish(
                lease=lease, call=call, status=CallStatus.FAILED, result=None, error=str(exc)
            )
        # Not saved yet: the checks below see the call as it will be recorded.
        draft = ToolCall(ticket_id=run.ticket_id, run=run, step=step, index=index, name=tool.name, arguments=args)
        ctx = ToolContext(ticket=ticket, call=draft)
        intent = {**common, "name": tool.name, "arguments": args, "replay_policy": tool.replay_policy}
        try:
            if tool.precheck is not None:
                tool.precheck(ctx, args)
        except ToolError as exc:
            call = agent_services.call_start(**intent, public_label=tool.public_label)
            return agent_services.call_finish(
                lease=lease, call=call, status=CallStatus.FAILED, result=None, error=str(exc)
            )
        reason = approval_reason(tool=tool, ctx=ctx, args=args)
        call = agent_services.call_start(
            **intent,
            public_label=tool.public_label,
            status=CallStatus.AWAITING_APPROVAL if reason else CallStatus.STARTED,
            approval_reason=reason,
        )
        if reason:
            pause_for_approval(lease=lease, run=run, call=call, reason=reason)
    return call


def _ends_turn(call: ToolCall) -> bool:
    tool = REGISTRY.get(call.name)
    return tool is not None and tool.ends_turn and call.status == CallStatus.SUCCEEDED


def _execute(lease: Lease, call: ToolCall, tool: Tool, ctx: ToolContext, *, again: bool = False) -> None:
    """Run the effect, then commit the outcome. The intent row is already committed.

    ``again``: recovery runs a call whose earlier attempt left no outcome; count it.
    """
    if not may_execute(call):
        # Unreachable through the loop (such a call is created paused); the last door stays shut anyway.
        logger.error("call %s on ticket %s needs an approval it does not have; not executed", call.pk, call.ticket_id)
        agent_services.call_finish(
            lease=lease, call=call, status=CallStatus.FAILED, result=None, error="not executed: no staff approval"
        )
        return
    if again:
        call = agent_services.call_retry(lease=lease, call=call)
    try:
        # No transaction around the handler: a tool commits its own steps (a
        # refund commits its intent before it calls the provider), so that what
        # it committed survives a failure or a crash after it.
        result = tool.handler(ctx, call.arguments)
    except ToolEscalation as exc:
        status = CallStatus.UNCERTAIN if exc.uncertain else CallStatus.FAILED
        call = agent_services.call_finish(
            lease=lease, call=call, status=status, result={"status": status}, error=str(exc)
        )
        agent_services.escalate(lease=lease, run=AgentRun.objects.get(pk=call.run_id), call=call,
                                customer_text=exc.customer_text, reason=str(exc))  # fmt: skip
        raise _Stop() from None
    except ToolUncertain as exc:
        agent_services.call_finish(
            lease=lease, call=call, status=CallStatus.UNCERTAIN, result={"status": "uncertain"}, error=str(exc)
        )
        return
    except ToolError as exc:
        agent_services.call_finish(lease=lease, call=call, status=CallStatus.FAILED, result=None, error=str(exc))
        return
    except LeaseLost:
        raise
    except Exception as exc:  # noqa: BLE001 - a tool crash is a result the model sees, and a failure counted
        logger.exception("tool %s failed on ticket %s", call.name, call.ticket_id)
        connection.close_if_unusable_or_obsolete()
        error = f"{type(exc).__name__}: {exc}"
        status = CallStatus.UNCERTAIN if call.replay_policy == ReplayPolicy.NEVER else CallStatus.FAILED
        agent_services.call_finish(lease=lease, call=call, status=status, result=None, error=error)
        raise _ToolCrashed(f"the tool {call.name} failed: {error}") from exc
    if call.replay_policy == ReplayPolicy.KEYED:
        faults.hit("after_keyed_effect")
    elif call.replay_policy == ReplayPolicy.NEVER:
        faults.hit("after_never_effect")
    agent_services.call_finish(lease=lease, call=call, status=CallStatus.SUCCEEDED, result=result)
