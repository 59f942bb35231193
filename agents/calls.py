"""Tool calls: the one module that writes ``ToolCall`` rows.

A call moves through ``CALL_TRANSITIONS`` (agents.models), like tickets, runs
and refunds through theirs: its intent is recorded ``started`` (or
``awaiting_approval`` when it needs a staff approval) before any effect; its
outcome makes it final. A staff decision is written on the call here too, by
the approvals app through ``call_record_decision``: it rings the ticket and the
lease holder applies it. Writes of the agent run inside the lease's fenced
transaction.
"""

from __future__ import annotations

import hashlib
import json
import secrets
from collections.abc import Callable
from typing import Any

from django.db.models import F
from django.utils import timezone

from agents.lease import Lease
from agents.models import (
    CALL_TRANSITIONS,
    FINAL_CALL_STATUSES,
    NOT_RUN,
    PAUSED_CALL_STATUSES,
    AgentRun,
    ApprovalDecision,
    CallStatus,
    ConfirmationDecision,
    ModelStep,
    ToolCall,
)
from support import rows
from support.storable import clean_json, clean_text
from tickets import services as ticket_services
from tickets.models import ActorKind, TicketEvent


class InvalidCallTransition(ValueError):
    """A call status change that CALL_TRANSITIONS does not allow."""


def check_transition(call: ToolCall, to_status: str) -> None:
    if to_status not in CALL_TRANSITIONS[call.status]:
        allowed = ", ".join(sorted(CALL_TRANSITIONS[call.status])) or "none (final)"
        raise InvalidCallTransition(f"call {call.pk} cannot go from {call.status} to {to_status}; allowed: {allowed}")


def arguments_digest(arguments: dict[str, Any]) -> str:
    """What a staff approval or a customer confirmation is bound to: these exact arguments."""
    canonical = json.dumps(arguments, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(canonical.encode()).hexdigest()


def idempotency_key(*, ticket_id: int, run_id: int, step_index: int, call_index: int) -> str:
    """Where the call sits in the ledger, and a random part: made once, when the intent is recorded,
    and read from the call's row ever after, so stable across retries and workers. The random part
    keeps it unique beyond this database: a deployment moved to a new database (its ids start again
    past the tickets it carried), or two deployments on one payment provider account, never send a
    refund under a key the provider already holds for another one."""
    return f"t{ticket_id}-r{run_id}-s{step_index}-c{call_index}-{secrets.token_hex(4)}"


def call_start(
    *,
    lease: Lease,
    run: AgentRun,
    step: ModelStep,
    index: int,
    model_call_id: str,
    name: str,
    arguments: dict[str, Any],
    replay_policy: str,
    public_label: str,
    status: str | None = None,
    approval_reason: str = "",
    draft: ToolCall | None = None,
) -> ToolCall:
    """Commit the intent (status ``started``) before any effect runs.

    With an ``approval_reason`` the call needs a staff approval: it is recorded as
    such in this same transaction, and the caller pauses it before committing.
    ``draft``: the unsaved call the caller checked, written as this intent.
    """
    with lease.guard():
        fields = {
            "ticket_id": run.ticket_id,
            "run": run,
            "step": step,
            "index": index,
            "model_call_id": model_call_id,
            "name": name,
            "arguments": arguments,
            "idempotency_key": idempotency_key(
                ticket_id=run.ticket_id, run_id=run.pk, step_index=step.index, call_index=index
            ),
            "replay_policy": replay_policy,
            "status": status or CallStatus.STARTED,
            "approval_required": bool(approval_reason),
            "approval_reason": approval_reason,
            "epoch": lease.epoch,
        }
        if draft is None:
            call = rows.new(ToolCall, **fields)
        else:
            call = draft
            for field, value in fields.items():
                setattr(call, field, value)
        rows.insert([call], keys_from_block=True)
        ticket_services.event_append(
            ticket=run.ticket_id,
            kind="tool_call_started",
            actor_kind=ActorKind.AGENT,
            actor_ref=f"run:{run.pk}",
            payload={"call_id": call.pk, "tool": name, "label": public_label},
            # Its label is told to the customer unless a person has taken the ticket by the time the
            # intent is written (the model wrote the step meanwhile; its run ends before it asks again).
            is_public=None if public_label else False,
        )
    return call


def call_finish(
    *,
    lease: Lease,
    call: ToolCall,
    status: str,
    result: dict[str, Any] | None,
    error: str = "",
) -> ToolCall:
    """Commit the outcome of a call. A call already final is left as it is."""
    error = clean_text(error)  # a tool's words, from wherever it read them
    with lease.guard():
        locked = ToolCall.objects.select_for_update().get(pk=call.pk)
        if locked.status in FINAL_CALL_STATUSES:
            return locked
        check_transition(locked, status)
        locked.status = status
        locked.result = clean_json(result) if result is not None else None
        locked.error = error[:2000]
        locked.finished_at = timezone.now()
        locked.save(update_fields=["status", "result", "error", "finished_at"])
        _call_finished_event(locked, status, error)
    return locked


# The error a keyed call that crashed keeps while it stays started: it was tried, and its effect may
# have happened (recovery reconciles it under its key; a run that ends records it uncertain).
CRASHED_PREFIX = "crashed after it was tried: "


def call_note_crash(*, lease: Lease, call: ToolCall, error: str) -> None:
    """A keyed call crashed (not a tool error): it stays started, marked as tried."""
    error = clean_text(error)
    with lease.guard():
        ToolCall.objects.filter(pk=call.pk, status=CallStatus.STARTED).update(error=(CRASHED_PREFIX + error)[:2000])
    call.error = (CRASHED_PREFIX + error)[:2000]


def was_tried(call: ToolCall) -> bool:
    """A started call that crashed after it was tried (``call_note_crash``)."""
    return call.status == CallStatus.STARTED and call.error.startswith(CRASHED_PREFIX)


# A question closed by its run's end is said withdrawn in the chat, unless its answer already said
# that nothing was done (cancelled, expired).
_UNTOLD = (None, "", ConfirmationDecision.CONFIRMED)


# Called, in the transaction that closes them, with the ids of calls that waited for a staff approval
# when their run ended: the approvals app withdraws their requests (agents.calls.calls_close_waiting).
WithdrawHook = Callable[..., None]
withdraw_hooks: list[WithdrawHook] = []


def calls_close_waiting(*, lease: Lease, run_id: int, reason: str) -> list[ToolCall]:
    """A run that ends leaves no call open: the calls waiting for staff or the customer, and the calls
    recorded to run that never ran (behind them, or after a call that stopped the run), are closed
    and never run. The requests of those that waited for staff are withdrawn. Caller: the transaction
    that ends the run, after recovery wrote down what any interrupted call did."""
    with lease.guard():
        # The requests first, then the calls: the order a staff decision takes its locks in (its request,
        # then its call), so that the two never wait on each other.
        asked = list(
            ToolCall.objects.filter(run_id=run_id, status=CallStatus.AWAITING_APPROVAL).values_list("pk", flat=True)
        )
        if asked:
            for hook in withdraw_hooks:
                hook(call_ids=asked, reason=reason)
        closing = list(
            ToolCall.objects.select_for_update()
            .filter(run_id=run_id, status__in=[*PAUSED_CALL_STATUSES, CallStatus.STARTED])
            .order_by("step_id", "index")
        )
        for call in closing:
            if was_tried(call):
                # Tried, and it crashed before its outcome was recorded: it may have happened (the
                # provider may have paid). Never "not run"; the reconciler settles a refund's row.
                check_transition(call, CallStatus.UNCERTAIN)
                call.status, call.finished_at = CallStatus.UNCERTAIN, timezone.now()
                call.error = f"tried, then the run ended ({reason}): {call.error}"[:2000]
                call.result = {"status": "uncertain", "note": "This was tried and may have happened."}
                call.save(update_fields=["status", "result", "error", "finished_at"])
                _call_finished_event(call, call.status, call.error)
                continue
            asked_the_customer = call.status == CallStatus.AWAITING_CONFIRMATION
            status = CallStatus.CANCELLED if asked_the_customer else CallStatus.FAILED
            check_transition(call, status)
            call.status, call.error, call.finished_at = status, f"{NOT_RUN}: {reason}"[:2000], timezone.now()
            call.result = {"status": "not_run", "note": f"The run ended before this call: {reason}"[:500]}
            call.save(update_fields=["status", "result", "error", "finished_at"])
            _call_finished_event(call, status, call.error)
            tell_not_done(call)
    return closing


def tell_not_done(call: ToolCall) -> None:
    """A call ends unrun after the customer read that it goes ahead: the chat says nothing was done,
    once. A question they were shown loses its buttons (and a Confirm that was never acted on is said
    to have done nothing: ``confirmation_withdrawn``); else, when staff approved it, the customer read
    "Our team approved your request; finishing it now" (``approval_decided``), and the chat says,
    under it, that it was stopped. Caller: the transaction that ends the call unrun."""
    if call.confirmation_required and _shown_to_the_customer(call):
        kind = "confirmation_withdrawn" if call.confirmation_decision in _UNTOLD else None
    else:
        kind = "approved_call_withdrawn" if call.approval_decision == ApprovalDecision.APPROVED else None
    if kind is None or TicketEvent.objects.filter(ticket_id=call.ticket_id, kind=kind, payload__call_id=call.pk):
        return  # nothing the customer read said it goes ahead, or they were told already
    ticket_services.event_append(
        ticket=call.ticket_id, kind=kind, actor_kind=ActorKind.AGENT,
        actor_ref=f"run:{call.run_id}", payload={"call_id": call.pk}, is_public=True,
    )  # fmt: skip


def _shown_to_the_customer(call: ToolCall) -> bool:
    """Was the customer shown this call's question (it is not, when a person had the ticket)?"""
    return TicketEvent.objects.filter(
        ticket_id=call.ticket_id, kind="confirmation_requested", payload__call_id=call.pk, is_public=True
    ).exists()


def calls_record_outcomes(*, lease: Lease, calls: list[ToolCall]) -> None:
    """Commit outcomes decided in memory (safe calls, which wait for the next step's transaction):
    one UPDATE for all of them, and their timeline events."""
    if not calls:
        return
    for call in calls:
        if call.status not in FINAL_CALL_STATUSES:
            raise InvalidCallTransition(f"call {call.pk}: {call.status} is not an outcome")
    with lease.guard():
        rows.update(calls, ["status", "result", "error", "finished_at"])
        for call in calls:
            _call_finished_event(call, call.status, call.error)


def _call_finished_event(call: ToolCall, status: str, error: str) -> None:
    ticket_services.event_append(
        ticket=call.ticket_id,
        kind="tool_call_uncertain" if status == CallStatus.UNCERTAIN else "tool_call_finished",
        actor_kind=ActorKind.AGENT if status != CallStatus.UNCERTAIN else ActorKind.SYSTEM,
        actor_ref=f"run:{call.run_id}",
        payload={"call_id": call.pk, "tool": call.name, "status": status, "error": error[:500]},
    )


def call_retry(*, lease: Lease, call: ToolCall) -> ToolCall:
    with lease.guard():
        ToolCall.objects.filter(pk=call.pk).update(attempts=F("attempts") + 1, epoch=lease.epoch)
    call.refresh_from_db()
    return call


class DecisionLanded(Exception):
    """A staff decision (or the customer's answer) was recorded on the call after the caller read
    it: nothing was written; read the call again and apply what was decided."""


def _as_read(call: ToolCall, field: str) -> dict[str, Any]:
    """The row as the caller read it, on ``field`` (a decision): a write made on that reading
    matches nothing once a decision has landed since."""
    value = getattr(call, field)
    return {f"{field}__isnull": True} if value is None else {field: value}


def call_pause(*, lease: Lease, call: ToolCall, reason: str) -> ToolCall:
    """The call waits for a staff approval on its exact arguments. An approval given on other
    arguments is cleared (a fresh request); a rejection or an expiry is never cleared, and a
    decision recorded since the caller read the call is never written over (DecisionLanded).
    Caller: inside the fenced transaction that records the pause."""
    if call.approval_decision in {ApprovalDecision.REJECTED, ApprovalDecision.EXPIRED}:
        raise DecisionLanded(f"call {call.pk} was {call.approval_decision}: it is not asked for again")
    if call.status != CallStatus.AWAITING_APPROVAL or call.approval_decision is not None:
        check_transition(call, CallStatus.AWAITING_APPROVAL)
    with lease.guard():
        written = ToolCall.objects.filter(pk=call.pk, **_as_read(call, "approval_decision")).update(
            status=CallStatus.AWAITING_APPROVAL,
            approval_required=True,
            approval_reason=reason,
            approval_decision=None,
            approval_note="",
            approval_digest="",
            approval_provider_seen=None,
            approval_order_number="",
        )
        if not written:
            raise DecisionLanded(f"call {call.pk} was decided since it was read")
    call.status, call.approval_required, call.approval_reason = CallStatus.AWAITING_APPROVAL, True, reason
    call.approval_decision, call.approval_note, call.approval_digest = None, "", ""
    call.approval_provider_seen, call.approval_order_number = None, ""
    return call


def call_cleared_to_run(*, lease: Lease, call: ToolCall) -> ToolCall:
    """A call approved by staff, or confirmed by the customer, goes back to ``started``, to run
    under its original idempotency key."""
    check_transition(call, CallStatus.STARTED)
    with lease.guard():
        ToolCall.objects.filter(pk=call.pk, status=call.status).update(status=CallStatus.STARTED)
    call.refresh_from_db()
    return call


def call_await_confirmation(*, lease: Lease, call: ToolCall, question: str, expires_at: Any, digest: str) -> ToolCall:
    """The call waits for the customer to confirm these exact arguments (a fresh question: any
    earlier answer is cleared). Caller: inside the fenced transaction that records the pause."""
    if call.status != CallStatus.AWAITING_CONFIRMATION or call.confirmation_decision is not None:
        check_transition(call, CallStatus.AWAITING_CONFIRMATION)
    changes = {
        "status": CallStatus.AWAITING_CONFIRMATION, "confirmation_required": True, "confirmation_text": question,
        "confirmation_expires_at": expires_at, "confirmation_decision": None, "confirmation_digest": digest,
    }  # fmt: skip
    with lease.guard():
        if not ToolCall.objects.filter(pk=call.pk, **_as_read(call, "confirmation_decision")).update(**changes):
            raise DecisionLanded(f"call {call.pk} was answered since it was read")
    for field, value in changes.items():
        setattr(call, field, value)
    return call


def call_record_confirmation(*, call_id: int, decision: str) -> int:
    """The customer's answer (or an expiry) on a call waiting for confirmation, once: the first
    answer stands. Caller: in the transaction that records it on the timeline. Returns the rows
    written (0 if the call no longer waits or was answered already)."""
    if decision not in ConfirmationDecision.values:
        raise ValueError(f"{decision!r} is not a confirmation decision")
    return ToolCall.objects.filter(
        pk=call_id, status=CallStatus.AWAITING_CONFIRMATION, confirmation_decision__isnull=True
    ).update(confirmation_decision=decision)


def call_record_decision(
    *,
    call_id: int,
    decision: str,
    note: str = "",
    digest: str = "",
    provider_seen: list[str] | None = None,
    order_number: str = "",
) -> int:
    """A staff decision (or an expiry) on a call waiting for approval, for the lease holder to apply.
    Caller: the approvals app, in the transaction that records its request's decision. ``provider_seen``:
    a refund's approval, the ids of the refunds the card showed held at the provider outside the ledger
    (None: the card showed none read). ``order_number``: a refund's approval, the order its card showed.
    Returns the rows written (0 if the call no longer waits)."""
    if decision not in ApprovalDecision.values:
        raise ValueError(f"{decision!r} is not an approval decision")
    changes: dict[str, Any] = {"approval_decision": decision}
    if decision != ApprovalDecision.EXPIRED:
        changes.update(
            approval_note=note,
            approval_digest=digest,
            approval_provider_seen=provider_seen,
            approval_order_number=order_number,
        )
    return ToolCall.objects.filter(pk=call_id, status=CallStatus.AWAITING_APPROVAL).update(**changes)
