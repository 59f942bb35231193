"""Running the tool calls a model step asked for: intent, effect, outcome.

The intent of every call a step asks for commits with the step itself, in one
transaction, together with everything decided about the call before it runs
(its arguments checked, the business rules checked, whether it needs a staff
approval, and if so the pause and the request: DESIGN.md, invariant 11).

Then each call runs by its replay policy (DESIGN.md, invariant 17):

- ``safe`` (a read): its result is kept in memory and commits with the next
  step; a crash before that runs it again;
- ``keyed`` and ``never``: the outcome commits at once, after the effect (intent
  before effect, outcome right after).
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any, NoReturn

from django.db import connection
from django.utils import timezone

from agents import calls, faults
from agents import services as agent_services
from agents.approval import apply_decision, may_execute, pause_for_approval
from agents.confirmation import (
    apply_confirmation,
    mark_for_confirmation,
    needs_confirmation,
    pause_for_confirmation,
)
from agents.lease import Lease, LeaseLost
from agents.models import (
    CUSTOMER_WROTE,
    CUSTOMER_WROTE_UNREAD,
    FINAL_CALL_STATUSES,
    NOT_RUN,
    PAUSED_RUN_STATUSES,
    PERSON_TOOK_OVER,
    AgentRun,
    CallStatus,
    ModelStep,
    ReplayPolicy,
    RunStatus,
    ToolCall,
)
from agents.outage import is_outage
from agents.pass_state import Pass
from agents.policy import approval_reason
from agents.profiles import enabled_tools_now, not_enabled
from agents.selectors import customer_wrote_since_the_go_ahead, person_took_the_ticket_since
from agents.tool_thread import run_bounded
from agents.tools import (
    REGISTRY,
    CustomerWroteSince,
    Tool,
    ToolContext,
    ToolError,
    ToolEscalation,
    ToolNeedsApproval,
    ToolStopped,
    ToolUncertain,
    parse_arguments,
)
from support import rows
from support.storable import clean_json, clean_text

logger = logging.getLogger(__name__)


class Stop(Exception):
    """The run stopped and a person has the ticket (an escalation)."""


class ToolCrashed(Exception):
    """A tool raised something other than a ToolError; its call is recorded as failed."""


def record_intents(p: Pass, step: ModelStep) -> str | None:
    """Record the intent of each call ``step`` asks for. Caller: inside the step's fenced transaction.
    Returns the run's paused state if a call paused it (for a staff approval, or the customer's
    confirmation), else None."""
    paused = None
    refused = []
    for index, requested in enumerate(step.tool_calls):
        call, refusal = _record_intent(p, step, index, requested)
        p.call_stored(call)
        if refusal:
            refused.append(refusal)
        if paused is None and call.status == CallStatus.AWAITING_APPROVAL:
            paused = RunStatus.WAITING_APPROVAL
        elif paused is None and call.status == CallStatus.AWAITING_CONFIRMATION:
            paused = RunStatus.WAITING_CONFIRMATION
    # Every call of the step refused as asked: the step was no progress (``Pass.refused_as_asked``).
    p.refused_as_asked = refused if step.tool_calls and len(refused) == len(step.tool_calls) else []
    return paused


def _record_intent(p: Pass, step: ModelStep, index: int, requested: dict[str, Any]) -> tuple[ToolCall, str]:
    """The call's intent, recorded; and, for a call that cannot be run as asked (a tool that does not
    exist, arguments that are not a JSON object the tool takes), the error it was refused with."""
    lease, run = p.lease, p.run
    common = {"lease": lease, "run": run, "step": step, "index": index, "model_call_id": requested["id"]}
    try:
        tool, args = parse_arguments(requested["name"], requested["arguments"])
    except ToolError as exc:
        call = calls.call_start(
            **common,
            name=str(requested["name"])[:100],
            arguments={"raw": str(requested["arguments"])[:2000]},
            replay_policy=ReplayPolicy.SAFE,
            public_label="",
        )
        return calls.call_finish(lease=lease, call=call, status=CallStatus.FAILED, result=None, error=str(exc)), str(
            exc
        )
    # Not saved yet: the checks below see the call as it will be recorded.
    draft = rows.new(ToolCall, ticket_id=run.ticket_id, run=run, step=step, index=index, name=tool.name, arguments=args)
    ctx = ToolContext(ticket=p.ticket, call=draft, policy=p.policy)
    if tool.name not in p.enabled_tools:
        call = calls.call_start(**common, name=tool.name, arguments=args, replay_policy=tool.replay_policy,
                                public_label="")  # fmt: skip
        error = not_enabled(tool.name, p.run.profile.version if p.run.profile_id else None)
        # A tool the model was not offered: as unknown to this run as a name that is no tool.
        return calls.call_finish(lease=lease, call=call, status=CallStatus.FAILED, result=None, error=error), error
    intent = {**common, "name": tool.name, "arguments": args, "replay_policy": tool.replay_policy}
    try:
        if tool.precheck is not None:
            tool.precheck(ctx, args)
    except ToolError as exc:
        call = calls.call_start(**intent, public_label=tool.public_label)
        # The tool's own answer on this request (an order not the customer's...): the model reads it.
        return calls.call_finish(lease=lease, call=call, status=CallStatus.FAILED, result=None, error=str(exc)), ""
    reason = approval_reason(tool=tool, ctx=ctx, args=args, always=p.approval_rules)
    confirm = not reason and needs_confirmation(tool, draft)
    call = calls.call_start(
        **intent,
        public_label=tool.public_label,
        status=CallStatus.AWAITING_APPROVAL if reason else CallStatus.AWAITING_CONFIRMATION if confirm else None,
        approval_reason=reason,
        draft=draft,
    )
    if reason:
        pause_for_approval(lease=lease, run=run, call=call, reason=reason)
    elif confirm:
        # The last gate before money moves: the customer confirms (after any approval; a call that
        # needs one is asked when it is approved, see agents.approval.apply_decision). Behind an
        # earlier call of this step that waits for staff, it is marked now and asked when reached.
        if run.status in PAUSED_RUN_STATUSES:
            mark_for_confirmation(lease=lease, call=call)
        else:
            pause_for_confirmation(lease=lease, run=run, call=call, tool=tool, ctx=ctx)
    return call, ""


def run_calls(p: Pass, step: ModelStep) -> str | None:
    """Run the calls a stored step asked for. Returns a run state to stop at, or None to go on."""
    lease, run = p.lease, p.run
    for index in range(len(step.tool_calls)):
        call = p.calls.get((step.pk, index))
        if call is None:
            # A step stored before its intents were (an older worker's ledger): record them now.
            with lease.guard():
                record_intents(p, step)
            p.reload()
            return None
        if call.status in FINAL_CALL_STATUSES:
            if ends_turn(call):
                return _end_turn(p, call)
            if stopped_for_the_customer(call):
                return _end_for_the_customer(p)  # stopped by a pass that ended before the run did
            continue
        if call.status == CallStatus.AWAITING_APPROVAL:
            p.flush_outcomes()
            state = apply_decision(lease=lease, run=run, call=call, ticket=p.ticket, execute=execute_now)
            p.reload()  # the decision wrote rows this pass did not track
            if state is not None:
                return state
            call = p.calls[(step.pk, index)]
        elif call.status == CallStatus.AWAITING_CONFIRMATION:
            p.flush_outcomes()
            state = apply_confirmation(lease=lease, run=run, call=call, ticket=p.ticket)
            p.reload()
            if state is not None:
                return state
            call = p.calls[(step.pk, index)]
            if call.status in FINAL_CALL_STATUSES:
                continue  # cancelled: the model reads it
            call = execute(p, call)
        else:
            call = execute(p, call)
        if call.status == CallStatus.AWAITING_APPROVAL:
            return RunStatus.WAITING_APPROVAL  # a review asked for since its intent: the run pauses on it
        if stopped_for_the_customer(call):
            return _end_for_the_customer(p)
        if run.failures and call.status == CallStatus.SUCCEEDED:
            p.flush_outcomes()
            agent_services.run_reset_failures(lease=lease, run=run)  # progress: the failures were not in a row
        if ends_turn(call):
            return _end_turn(p, call)
    p.results_known(step)
    return None


def _end_turn(p: Pass, call: ToolCall) -> str:
    p.flush_outcomes()
    agent_services.run_transition(lease=p.lease, run=p.run, to_status=RunStatus.HANDED_OFF, outcome=call.name)
    return RunStatus.HANDED_OFF


# The outcome of a run ended because the customer wrote after one of its calls was decided (approved
# by staff, or by the agent), before it was carried out; the calls it still had waiting close with it.
RUN_ENDED_FOR_THE_CUSTOMER = "the customer wrote after a call was decided, before it was carried out"
_STOPPED_FOR_THE_CUSTOMER = frozenset({f"{NOT_RUN}: {CUSTOMER_WROTE}", f"{NOT_RUN}: {CUSTOMER_WROTE_UNREAD}"})


def stopped_for_the_customer(call: ToolCall) -> bool:
    """A call not run because the customer wrote after its go-ahead (``_not_run_for_the_customer``)."""
    return call.status == CallStatus.FAILED and call.error in _STOPPED_FOR_THE_CUSTOMER


def _end_for_the_customer(p: Pass) -> str:
    """The customer wrote after a call of this run was decided, before it was carried out: the run
    ends there, without a reply, and the next one (under the same lease) takes their message in and
    answers it, reading that the call was not run (asked again, it is decided again: reviewed again,
    when it needs a review)."""
    p.flush_outcomes()
    agent_services.run_transition(
        lease=p.lease, run=p.run, to_status=RunStatus.COMPLETED, outcome=RUN_ENDED_FOR_THE_CUSTOMER
    )
    return RunStatus.COMPLETED


def _not_run_for_the_customer(lease: Lease, call: ToolCall) -> None:
    """The call ends unrun, nothing done; a call staff approved is said stopped in the chat, under the
    approval (the customer read "finishing it now"). The run then ends for their message
    (``_end_for_the_customer``)."""
    if call.approval_decision is not None:
        why, error = "customer_wrote", f"{NOT_RUN}: {CUSTOMER_WROTE}"
        note = (
            "Not done: the customer wrote after staff approved this, before it was carried out. Answer their "
            "message; if they still want it, it can be asked for again (it is reviewed again)."
        )
    else:
        why, error = "customer_wrote_unread", f"{NOT_RUN}: {CUSTOMER_WROTE_UNREAD}"
        note = (
            "Not done: the customer wrote while this was being decided, before it was carried out, and their "
            "message was not read. Answer it; do this again only if it still applies after what they wrote."
        )
    with lease.guard():
        call = calls.call_finish(
            lease=lease, call=call, status=CallStatus.FAILED,
            result={"status": "not_run", "not_run_because": why, "note": note}, error=error,
        )  # fmt: skip
        calls.tell_not_done(call)


def ends_turn(call: ToolCall) -> bool:
    tool = REGISTRY.get(call.name)
    return tool is not None and tool.ends_turn and call.status == CallStatus.SUCCEEDED


def execute(p: Pass, call: ToolCall, *, again: bool = False) -> ToolCall:
    """Run one call's effect. A safe call's outcome waits in memory for the next step's
    transaction; any other commits now. Returns the call as it stands."""
    tool = REGISTRY.get(call.name)
    if tool is None:
        return calls.call_finish(
            lease=p.lease, call=call, status=CallStatus.FAILED, result=None, error=f"unknown tool {call.name}"
        )
    if call.name not in p.enabled_tools:
        error = f"{NOT_RUN}: {not_enabled(call.name, p.run.profile.version if p.run.profile_id else None)}"
        return calls.call_finish(lease=p.lease, call=call, status=CallStatus.FAILED, result=None, error=error)
    if call.replay_policy == ReplayPolicy.SAFE and may_execute(call) and not again:
        outcome = _run_handler(p.lease, call, tool, ToolContext(ticket=p.ticket, call=call))
        if outcome is not None:
            faults.hit("after_safe_effect")
            status, result, error = outcome
            call.status, call.error, call.finished_at = status, clean_text(error)[:2000], timezone.now()
            call.result = clean_json(result) if result is not None else None
            p.unsaved_outcomes.append(call)
            return call
    p.flush_outcomes()
    try:
        execute_now(p.lease, call, tool, ToolContext(ticket=p.ticket, call=call), again=again)
    except ToolNeedsApproval as late:
        pause_for_approval(lease=p.lease, run=p.run, call=call, reason=late.reason)
    fresh = ToolCall.objects.get(pk=call.pk)
    p.call_stored(fresh)
    return fresh


def _run_handler(lease: Lease, call: ToolCall, tool: Tool, ctx: ToolContext) -> tuple[str, Any, str] | None:
    """A safe call's handler; (status, result, error), or None when it must be recorded at once
    (a crash or an escalation, which execute_now handles)."""
    try:
        result = run_bounded(lambda _: tool.handler(ctx, call.arguments), lease=None, what=f"the tool {call.name}")
        return CallStatus.SUCCEEDED, result, ""
    except ToolEscalation:
        return None  # a safe call may run again: execute_now runs it and records the escalation
    except LeaseLost:
        raise
    except ToolUncertain as exc:
        return CallStatus.UNCERTAIN, {"status": "uncertain"}, str(exc)
    except ToolError as exc:
        return CallStatus.FAILED, None, str(exc)
    except Exception as exc:  # noqa: BLE001 - a tool crash is a result the model sees, and a failure counted
        logger.exception("tool %s failed on ticket %s", call.name, call.ticket_id)
        connection.close_if_unusable_or_obsolete()
        error = f"{type(exc).__name__}: {exc}"
        if not is_outage(exc):  # an outage leaves the call to run again (as in ``execute_now``)
            calls.call_finish(lease=lease, call=call, status=CallStatus.FAILED, result=None, error=error)
        raise ToolCrashed(f"the tool {call.name} failed: {error}") from exc


def _settled_or_escalated(lease: Lease, call: ToolCall, exc: ToolEscalation) -> bool:
    """Decided in one fenced transaction, with what the escalation is about locked (``exc.settled``):
    True when the effect did happen after all (the call's result is stored, no one is told otherwise);
    else the call's outcome is stored, the customer told (unless they were, ``exc.told``) and the
    ticket handed to a person, and False."""
    with lease.guard():
        settled = exc.settled() if exc.settled is not None else None
        if settled is not None:
            calls.call_finish(lease=lease, call=call, status=CallStatus.SUCCEEDED, result=settled)
            return True
        status = CallStatus.UNCERTAIN if exc.uncertain else CallStatus.FAILED
        call = calls.call_finish(lease=lease, call=call, status=status, result={"status": status}, error=str(exc))
        told = exc.told is not None and exc.told()
        agent_services.escalate(
            lease=lease,
            run=AgentRun.objects.get(pk=call.run_id),
            call=call,
            customer_text=None if told else exc.customer_text,
            reason=str(exc),
        )
    return False


def execute_now(lease: Lease, call: ToolCall, tool: Tool, ctx: ToolContext, *, again: bool = False) -> None:
    """Run the effect, then commit the outcome. The intent row is already committed.

    ``again``: recovery runs a call whose earlier attempt left no outcome; count it.
    """
    if not may_execute(call):
        # Unreachable through the loop (such a call is created paused); the last door stays shut anyway.
        logger.error("call %s on ticket %s needs an approval it does not have; not executed", call.pk, call.ticket_id)
        calls.call_finish(
            lease=lease, call=call, status=CallStatus.FAILED, result=None, error="not executed: no staff approval"
        )
        return
    version, enabled = enabled_tools_now(call.run_id)
    if enabled is not None and call.name not in enabled:
        # Staff moved the paused run to a version that turned this tool off: what it waited for is not run.
        calls.call_finish(
            lease=lease,
            call=call,
            status=CallStatus.FAILED,
            result=None,
            error=f"{NOT_RUN}: {not_enabled(call.name, version)}",
        )
        return
    if call.replay_policy != ReplayPolicy.SAFE and person_took_the_ticket_since(
        AgentRun(pk=call.run_id, ticket_id=call.ticket_id)
    ):
        # A person took the ticket (or resolved or closed it) while this step was being written or its
        # calls ran: no effect starts after that. (Checked again here, next to the effect, not only
        # when the pass began; a tool that commits its own steps checks again next to each attempt.)
        if again:  # an earlier attempt left no outcome: it may have happened (the reconciler settles it)
            _leave_to_the_person(
                lease, call, CallStatus.UNCERTAIN,
                "not tried again: a person took the ticket over; an earlier attempt may have happened",
            )  # fmt: skip
        _leave_to_the_person(lease, call, CallStatus.FAILED, f"{NOT_RUN}: {PERSON_TOOK_OVER}")
    if not again and customer_wrote_since_the_go_ahead(call, asks_the_customer=tool.confirm_question is not None):
        # The customer wrote after it was decided (approved by staff, or by the agent on words read
        # before), before it ran: maybe to stop it, and nothing else reads their words before the
        # effect. (A refund checks again next to its payment; a call tried before is left to its tool,
        # which knows whether that try may have happened.)
        _not_run_for_the_customer(lease, call)
        return
    if again:
        call = calls.call_retry(lease=lease, call=call)
    try:
        # No transaction around the handler: a tool commits its own steps (a
        # refund commits its intent before it calls the provider), so that what
        # it committed survives a failure or a crash after it. Bounded by
        # AGENT_TOOL_TIMEOUT_SECONDS: past it ToolTimedOut, handled below as a
        # crash by the call's replay policy (agents.tool_thread).
        result = run_bounded(
            lambda lent: tool.handler(dataclasses.replace(ctx, lease=lent), call.arguments),
            lease=lease,
            what=f"the tool {call.name}",
        )
    except ToolEscalation as exc:
        if _settled_or_escalated(lease, call, exc):
            return
        raise Stop() from None
    except ToolStopped as exc:
        _leave_to_the_person(lease, call, CallStatus.UNCERTAIN if exc.uncertain else CallStatus.FAILED, str(exc))
    except CustomerWroteSince:
        _not_run_for_the_customer(lease, call)
        return
    except ToolUncertain as exc:
        calls.call_finish(
            lease=lease, call=call, status=CallStatus.UNCERTAIN, result={"status": "uncertain"}, error=str(exc)
        )
        return
    except ToolError as exc:
        calls.call_finish(lease=lease, call=call, status=CallStatus.FAILED, result=None, error=str(exc))
        return
    except (LeaseLost, ToolNeedsApproval):
        raise
    except Exception as exc:  # noqa: BLE001 - a tool crash is a result the model sees, and a failure counted
        logger.exception("tool %s failed on ticket %s", call.name, call.ticket_id)
        connection.close_if_unusable_or_obsolete()
        error = f"{type(exc).__name__}: {exc}"
        if call.replay_policy == ReplayPolicy.KEYED:
            # Its effect may have happened (the provider paid, then the database went away): the call
            # stays started, marked as tried, and the next pass reconciles it under its key, then
            # completes it or runs it again under the same key (DESIGN.md, invariant 5). A crash every
            # time is counted each time, and parks the ticket with a person (the call then uncertain).
            calls.call_note_crash(lease=lease, call=call, error=error)
            raise ToolCrashed(f"the tool {call.name} failed: {error}") from exc
        if call.replay_policy == ReplayPolicy.NEVER:
            calls.call_finish(lease=lease, call=call, status=CallStatus.UNCERTAIN, result=None, error=error)
        elif not is_outage(exc):
            calls.call_finish(lease=lease, call=call, status=CallStatus.FAILED, result=None, error=error)
        # A safe call cut off by an outage (the database's connection lost, Redis out of reach) is not
        # its result: recorded failed, the model was given the error and answered the customer without
        # what the call was to read (an order, a refund then never paid). It stays to run, and the
        # pass is tried again after the outage's backoff (agents.outage), when the loop runs it.
        raise ToolCrashed(f"the tool {call.name} failed: {error}") from exc
    if call.replay_policy == ReplayPolicy.KEYED:
        faults.hit("after_keyed_effect")
    elif call.replay_policy == ReplayPolicy.NEVER:
        faults.hit("after_never_effect")
    calls.call_finish(lease=lease, call=call, status=CallStatus.SUCCEEDED, result=result)


def _leave_to_the_person(lease: Lease, call: ToolCall, status: str, error: str) -> NoReturn:
    """A person has the ticket: the call ends unrun (or, after an attempt, uncertain) and the run hands
    the ticket to them, saying nothing to the customer (the person answers)."""
    with lease.guard():
        call = calls.call_finish(lease=lease, call=call, status=status, result=None, error=error)
        if status == CallStatus.FAILED:
            calls.tell_not_done(call)  # unrun: a refund the customer confirmed or staff approved is said stopped
    agent_services.run_end_for_person(lease=lease, run=AgentRun.objects.get(pk=call.run_id))
    raise Stop()
