"""Recovery: what a dead worker left behind on a run, resolved by each call's replay policy.

Runs at the start of every pass and costs nothing when there is nothing to
recover (it reads only what the pass loaded). A run taken up after a clean stop
(a pause for approval, a model retry) is not a recovery: only a lease taken
from an owner that never released it is.

- A generation cut off mid-stream left text in the streaming buffer and no
  step: it is recorded as an interrupted step with its wasted tokens, and
  generated again.
- A call left ``started``: ``safe`` runs again; ``keyed`` asks its reconcile
  hook what happened under its idempotency key, then finishes or retries under
  the same key; ``never`` becomes ``uncertain`` and the model is told.
- A call that needs an approval it does not have is paused again, never run.
- A call left ``started`` behind an earlier call of its step that has not
  finished (one waiting for staff or the customer) was never attempted: the
  calls of a step run in order. It is left for the loop to run when it gets
  there, after the decision.

With a person in charge of the ticket (``rerun=False``), recovery only writes
down what happened: a keyed call proven done by its key is recorded done; no
call runs again (the agent moves no money on a ticket a person holds), and a
call that may have taken effect is recorded uncertain.
"""

from __future__ import annotations

from typing import Any

from agents import calls
from agents import services as agent_services
from agents.approval import may_execute, pause_for_approval
from agents.execution import Stop, execute
from agents.lease import Lease
from agents.llm import wasted_tokens
from agents.models import (
    FINAL_CALL_STATUSES,
    PERSON_TOOK_OVER,
    AgentRun,
    CallStatus,
    ReplayPolicy,
    RunStatus,
    StepStatus,
    ToolCall,
)
from agents.outage import patience_seconds
from agents.pass_state import Pass, stream_position
from agents.tool_thread import run_bounded
from agents.tools import REGISTRY, ToolContext
from tickets import realtime


def recover(p: Pass, *, rerun: bool = True) -> None:
    lease, run = p.lease, p.run
    resumed = _taken_from_a_stopped_owner(lease, run)
    found: dict[str, list[dict[str, Any]]] = {"interrupted_steps": [], "rerun": [], "reconciled": [], "uncertain": []}
    if lease.took_over_from:
        _interrupted_generation(p, found)
    for step in [s for s in p.run_steps if s.status == StepStatus.STARTED]:
        # A step row stored before its answer (an older worker's ledger).
        agent_services.step_mark_interrupted(lease=lease, step=step, wasted=0)
        found["interrupted_steps"].append({"step": step.index, "wasted_tokens": 0})

    # Only a worker that stopped without releasing the lease leaves a call interrupted. After a clean
    # stop (a pause at a step's intents), a call recorded to run was never attempted: the loop runs it.
    # So does a keyed call that crashed after it was tried (its worker lived on and released the lease).
    started = [
        c for c in p.calls.values()
        if c.run_id == run.pk and c.status == CallStatus.STARTED
        and ((lease.took_over_from and _reached(p, c)) or calls.was_tried(c))
    ]  # fmt: skip
    limit = p.stop_limit if rerun else None  # the stopped owner was counted before the ledger was read
    for call in sorted(started, key=lambda c: (_step_index(p, c), c.index)):
        tool = REGISTRY.get(call.name)
        entry = {"tool": call.name, "arguments": call.arguments, "idempotency_key": call.idempotency_key}
        if not rerun or limit:
            _record_only(p, call, tool, entry, found, **({"why": limit} if limit else {}))
            continue
        if tool is not None and not may_execute(call):
            # Never runs without its approval, whatever left it started: ask for it (again).
            pause_for_approval(lease=lease, run=run, call=call, reason=call.approval_reason or "needs a staff approval")
            break
        if tool is None or call.replay_policy == ReplayPolicy.NEVER:
            calls.call_finish(
                lease=lease,
                call=call,
                status=CallStatus.UNCERTAIN,
                result={"status": "uncertain", "note": "The worker stopped during this call; it may have happened."},
                error="interrupted; not repeated automatically (replay policy: never)",
            )
            found["uncertain"].append(entry)
        elif call.replay_policy == ReplayPolicy.KEYED and tool.reconcile is not None:
            proven = _reconcile(p, call, tool)
            if proven is not None:
                calls.call_finish(lease=lease, call=call, status=CallStatus.SUCCEEDED, result=proven)
                found["reconciled"].append(entry)
            else:
                _run_again(p, call, entry, found)
        else:
            # safe: run it again; keyed without a reconcile hook: retry under the same key.
            _run_again(p, call, entry, found)

    if limit:
        agent_services.park(lease=lease, run=run, error=limit, failures=run.failures)
        raise Stop()
    touched = any(found.values()) or bool(started)
    note = _recovery_note(p, run, found) if resumed or any(found.values()) else None
    if note is not None or lease.epoch not in run.epochs:
        agent_services.run_note_resume(lease=lease, run=run, note=note)
    if touched or note is not None:
        p.reload()


def owner_stopped(lease: Lease, run: AgentRun) -> tuple[bool, str | None]:
    """Counted before the pass reads the run's ledger (``agents.runner._drive``): the worker that
    carried this run on stopped without releasing it (a crash, a kill, the memory limit, a restart),
    reading the ledger, during a model step or a call. A failure of the run, counted in a row like
    any other, so a ledger, a step or a call that stops every worker that takes it on (a
    conversation too large for the worker's memory, a crash in a library) is not taken on forever.
    Progress after it (a call done, or a step stored by the pass that took over) resets the count.

    Returns whether it counted one, and why the run stops at the limit (None below it). Only for a
    run an earlier lease worked on: a run this pass has just started owes nothing to a worker that
    stopped after finishing the one before. Past the limit (the pass that reached it stopped too,
    before it could park the run) the run is parked at once, without reading its ledger again.
    """
    if not _taken_from_a_stopped_owner(lease, run) or run.status != RunStatus.RUNNING:
        return False, None
    if lease.took_over_from_a_cut and patience_seconds():
        _owner_cut_off(lease, run)
        return False, None
    failures = agent_services.run_record_failure(
        lease=lease, run=run, error="the worker carrying this run on stopped before it finished"
    )
    if failures < agent_services.max_failures():
        return True, None
    limit = f"the workers carrying this run on stopped {failures} time(s) in a row; not tried again"
    if failures > agent_services.max_failures():
        agent_services.park(lease=lease, run=run, error=limit, failures=failures)
        raise Stop()
    return True, limit


CUT_OFF = "the database ended the session of the worker carrying this run on (the worker lived on)"


def _owner_cut_off(lease: Lease, run: AgentRun) -> None:
    """The owner lived on but the database ended its session (``agents.lease._Heartbeat``): its pass
    was lost to an outage of the database, not to a crash of its worker, so it is counted on the
    outage under way (AGENT_OUTAGE_PATIENCE_SECONDS), as its own failed statement would have been,
    and the customer is told once that the answer is delayed, as for any outage."""
    outage = agent_services.run_record_outage(lease=lease, run=run, error=CUT_OFF, patience=patience_seconds())
    if not outage.within:
        error = f"out of reach for {outage.lasted:.0f} s (AGENT_OUTAGE_PATIENCE_SECONDS): {CUT_OFF}"
        agent_services.park(lease=lease, run=run, error=error, failures=outage.tries)
        raise Stop()
    if outage.tries == agent_services.max_failures():
        agent_services.tell_delayed(lease=lease, run=run, error=CUT_OFF, tries=outage.tries)


def _taken_from_a_stopped_owner(lease: Lease, run: AgentRun) -> bool:
    """This lease was taken from an owner that never released it, and an earlier lease worked on the run."""
    return bool(lease.took_over_from) and bool(run.epochs) and lease.epoch not in run.epochs


def _run_again(p: Pass, call: ToolCall, entry: dict[str, Any], found: dict[str, list[Any]]) -> None:
    """Run an interrupted call again (its worker's stop was counted by ``owner_stopped``); a call
    that succeeds is progress: the stop was a worker's (a deploy, a restart), not this call's."""
    done = execute(p, call, again=True)
    found["rerun"].append(entry)
    if done.status == CallStatus.SUCCEEDED:
        agent_services.run_reset_failures(lease=p.lease, run=p.run)


def _reached(p: Pass, call: ToolCall) -> bool:
    """Did the loop get to this call? The calls of a step run in order: one behind an earlier call
    of its step that has not finished (waiting for staff or the customer) never started."""
    return all(
        other.status in FINAL_CALL_STATUSES
        for other in p.calls.values()
        if other.step_id == call.step_id and other.index < call.index
    )


def _record_only(
    p: Pass, call: ToolCall, tool: Any, entry: dict[str, Any], found: dict[str, list[Any]],
    *, why: str = PERSON_TOOK_OVER,
) -> None:  # fmt: skip
    """A person has the ticket (or ``why`` else): write down what this interrupted call did, run nothing.
    Its error names the person's take-over in the words every stop by a person is recorded in (a
    refund asked again on that order is reviewed: ``agents.refunds._stopped_before``)."""
    if tool is not None and call.replay_policy == ReplayPolicy.KEYED and tool.reconcile is not None:
        proven = _reconcile(p, call, tool)
        if proven is not None:
            calls.call_finish(lease=p.lease, call=call, status=CallStatus.SUCCEEDED, result=proven)
            found["reconciled"].append(entry)
            return
    if tool is not None and call.replay_policy == ReplayPolicy.SAFE:
        calls.call_finish(
            lease=p.lease, call=call, status=CallStatus.FAILED, result=None,
            error=f"interrupted; not run again: {why}",
        )  # fmt: skip
        return
    calls.call_finish(
        lease=p.lease,
        call=call,
        status=CallStatus.UNCERTAIN,
        result={"status": "uncertain", "note": "The worker stopped during this call; it may have happened."},
        error=f"interrupted; not repeated: {why}",
    )
    found["uncertain"].append(entry)


def _reconcile(p: Pass, call: ToolCall, tool: Any) -> dict[str, Any] | None:
    """What happened under the call's key, asked within AGENT_TOOL_TIMEOUT_SECONDS (a provider that
    does not answer fails the pass, counted, instead of holding it: ``agents.tool_thread``)."""
    ctx = ToolContext(ticket=p.ticket, call=call)
    return run_bounded(lambda _: tool.reconcile(ctx, call.arguments), lease=None, what=f"reconciling {call.name}")


def _step_index(p: Pass, call: ToolCall) -> int:
    return next((s.index for s in p.steps if s.pk == call.step_id), 0)


def _interrupted_generation(p: Pass, found: dict[str, list[dict[str, Any]]]) -> None:
    """The dead worker was streaming a step it never stored: record it, with the tokens wasted."""
    stream, streamed = realtime.streamed_so_far(p.ticket.pk)
    position = stream_position(stream) if stream is not None else None
    if position is None or position[0] != p.run.pk:
        return
    _, index, attempt = position
    if any(s.index == index and s.attempt == attempt for s in p.run_steps):
        realtime.stream_finished(p.ticket.pk, stream)
        return
    wasted = wasted_tokens(len(streamed))
    step = agent_services.step_store(
        lease=p.lease,
        run=p.run,
        index=index,
        attempt=attempt,
        model_name=p.run.model_name,
        request_prefix=None,
        request_messages=[],
        status=StepStatus.INTERRUPTED,
        error="interrupted; generated again",
        wasted=wasted,
    )
    p.steps.append(step)
    realtime.stream_finished(p.ticket.pk, stream)
    found["interrupted_steps"].append({"step": index, "wasted_tokens": wasted})


def _recovery_note(p: Pass, run: AgentRun, found: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    run_calls = sorted(ToolCall.objects.filter(run=run).select_related("step"), key=lambda c: (c.step.index, c.index))
    completed = [c.name for c in run_calls if c.status == CallStatus.SUCCEEDED]
    failed = [c.name for c in run_calls if c.status == CallStatus.FAILED]
    uncertain = [c.name for c in run_calls if c.status == CallStatus.UNCERTAIN]
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
