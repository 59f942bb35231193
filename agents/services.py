"""Writes of the agent's ledger. Every function that writes for a run takes the
lease and writes inside ``lease.guard()``, so a worker that lost the lease
cannot write (fencing).
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db.models import F, Subquery, Sum
from django.db.models.functions import Now
from django.utils import timezone

from agents import calls
from agents.lease import Lease
from agents.llm import ModelResponse
from agents.models import (
    ENDED_RUN_STATUSES,
    PAUSED_RUN_STATUSES,
    PERSON_TOOK_OVER,
    RUN_TRANSITIONS,
    START_FAILED,
    AgentProfile,
    AgentRun,
    ModelStep,
    RunStatus,
    StepStatus,
    ToolCall,
)
from agents.selectors import person_took_the_ticket_since, start_counted_since
from support import reads, rows
from support.storable import clean_text
from tickets import services as ticket_services
from tickets.models import AGENT_STAYS_OUT, ActorKind, AuthorKind, Message, Ticket, TicketEvent, TicketStatus
from tickets.selectors import ticket_locked_for_reply, unanswered_messages


def _actor(run: AgentRun) -> str:
    return f"run:{run.pk}"


# The customer messages a new run takes in, locked, oldest first.
_messages_to_take_in = reads.Kept(
    lambda ticket_id: (
        unanswered_messages(ticket_id=ticket_id).select_for_update().order_by("created_at", "id").values("pk")
    )
)


def run_start(*, lease: Lease, ticket: Ticket, model_name: str, profile: AgentProfile | None = None) -> AgentRun | None:
    """Start a run for the customer messages not yet taken in; None if there are none."""
    with lease.guard():
        # The messages, locked, and the run's key from the sequence (a later run of the ticket has a
        # larger one), in one round trip.
        taken, key = reads.fetch_together([_messages_to_take_in.sql(ticket.pk), rows.new_key_sql(AgentRun)])
        inputs = [row[0] for row in taken]
        if not inputs:
            return None
        now = timezone.now()
        run = AgentRun(
            pk=key[0][0],
            ticket=ticket,
            input_message_ids=inputs,
            model_name=model_name,
            profile=profile,
            epochs=[lease.epoch],
            started_at=now,
        )
        rows.update([Message(pk=pk, ticket_id=ticket.pk, agent_handled_at=now) for pk in inputs], ["agent_handled_at"])
        rows.insert([run])
        ticket_services.event_append(
            ticket=ticket,
            kind="agent_run_started",
            actor_kind=ActorKind.AGENT,
            actor_ref=_actor(run),
            payload={"run_id": run.pk, "messages": run.input_message_ids},
            is_public=True,
        )
    return run


def run_transition(
    *,
    lease: Lease,
    run: AgentRun,
    to_status: str,
    outcome: str = "",
    tokens: tuple[int, int, int] | None = None,
    nothing_waits: bool = False,
) -> AgentRun:
    """Move the run to ``to_status`` (RUN_TRANSITIONS). Only the lease holder writes runs, so the
    status this worker knows is the one in the table; the UPDATE checks it all the same.
    ``tokens``: the run's (prompt, completion, wasted) totals, summed from its steps.

    A run that ends closes the calls it left waiting (``calls.calls_close_waiting``), unless the
    caller knows that none waits (``nothing_waits``: a reply after every call finished)."""
    if to_status != run.status and to_status not in RUN_TRANSITIONS[run.status]:
        raise ValueError(f"run {run.pk} cannot go from {run.status} to {to_status}")
    changes: dict[str, Any] = {"status": to_status, "outcome": outcome or run.outcome}
    if tokens is None:
        totals = ModelStep.objects.filter(run_id=run.pk).aggregate(
            p=Sum("prompt_tokens"), c=Sum("completion_tokens"), w=Sum("wasted_tokens")
        )
        tokens = (totals["p"] or 0, totals["c"] or 0, totals["w"] or 0)
    if to_status in ENDED_RUN_STATUSES:
        changes["ended_at"] = timezone.now()
    changes["prompt_tokens"], changes["completion_tokens"], changes["wasted_tokens"] = tokens
    with lease.guard():
        if to_status in ENDED_RUN_STATUSES and not nothing_waits:
            calls.calls_close_waiting(lease=lease, run_id=run.pk, reason=outcome or f"the run {to_status}")
        _run_update(run, changes, refusal=f"run {run.pk} is no longer {run.status}: not moved to {to_status}")
        ticket_services.event_append(
            ticket=run.ticket_id,
            kind=f"agent_run_{to_status}",
            actor_kind=ActorKind.AGENT,
            actor_ref=_actor(run),
            payload={"run_id": run.pk, "outcome": outcome},
            is_public=True,  # a run going on again (a decision, a Confirm): the chat says it is typing
        )
    for name, value in changes.items():
        setattr(run, name, value)
    return run


def _run_update(run: AgentRun, changes: dict[str, Any], *, refusal: str) -> None:
    """Write ``changes`` on the run, held for the statement that ends the transaction (with its
    events and fence), which fails whole (``rows.RowChangedElsewhere``) if the run's status is no
    longer the one this worker knows. The run in memory changes only once that has committed."""
    moved = copy.copy(run)
    for name, value in changes.items():
        setattr(moved, name, value)
    rows.update([moved], list(changes), unless_changed=({"status": run.status}, refusal))


def run_note_resume(*, lease: Lease, run: AgentRun, note: dict[str, Any] | None) -> None:
    """Record that this lease epoch works on the run, with the recovery note if a worker died."""
    if note is None and lease.epoch in run.epochs:
        return
    with lease.guard():
        locked = AgentRun.objects.select_for_update().get(pk=run.pk)
        if lease.epoch not in locked.epochs:
            locked.epochs = [*locked.epochs, lease.epoch]
        if note:
            locked.recovery_notes = [*locked.recovery_notes, note]
        locked.save(update_fields=["epochs", "recovery_notes"])
        if note:
            ticket_services.event_append(
                ticket=run.ticket_id,
                kind="agent_run_recovered",
                actor_kind=ActorKind.SYSTEM,
                actor_ref=_actor(run),
                payload={"run_id": run.pk, "epoch": lease.epoch, **note},
            )
    run.epochs, run.recovery_notes = locked.epochs, locked.recovery_notes


def step_store(
    *,
    lease: Lease,
    run: AgentRun,
    index: int,
    attempt: int,
    model_name: str,
    request_prefix: ModelStep | None,
    request_messages: list[dict[str, Any]],
    response: ModelResponse | None = None,
    status: str = StepStatus.COMPLETED,
    error: str = "",
    wasted: int = 0,
    started_at: datetime | None = None,
    read_seq: int | None = None,
    outage: bool = False,
) -> ModelStep:
    """Store one model step, completed (with its ``response``) or not (failed, interrupted).

    Caller: inside the step's fenced transaction, with the intents of the calls it asks for.
    """
    now = timezone.now()
    step = rows.new(
        ModelStep,
        run=run,
        ticket_id=run.ticket_id,
        index=index,
        attempt=attempt,
        status=status,
        model_name=model_name,
        request_prefix=request_prefix,
        request_messages=request_messages,
        error=error[:2000],
        wasted_tokens=wasted,
        epoch=lease.epoch,
        started_at=started_at or now,
        completed_at=now,
        read_seq=read_seq,
        outage=outage,
    )
    if response is not None:
        step.response_text = response.text
        step.tool_calls = [{"id": c.id, "name": c.name, "arguments": c.arguments} for c in response.tool_calls]
        step.finish_reason = response.finish_reason
        step.prompt_tokens = response.usage.prompt_tokens
        step.completion_tokens = response.usage.completion_tokens
        step.usage_estimated = response.usage.estimated
    # Where this step sits among the ticket's messages when a later turn rebuilds the conversation:
    # the ticket's timeline position, read by the INSERT itself.
    position = ("(SELECT last_event_seq FROM tickets_ticket WHERE id = %s)", [run.ticket_id])
    with lease.guard():
        rows.insert([step], computed={"ticket_seq": position}, keys_from_block=True)
    return step


def step_mark_interrupted(*, lease: Lease, step: ModelStep, wasted: int) -> None:
    with lease.guard():
        ModelStep.objects.filter(pk=step.pk).update(
            status=StepStatus.INTERRUPTED, error="interrupted; generated again", wasted_tokens=wasted,
            completed_at=timezone.now(),
        )  # fmt: skip


def split_reply(text: str, limit: int) -> list[str]:
    """A long answer as several messages of at most ``limit`` characters, cut at a paragraph,
    line or word where one is near, so nothing is lost and nothing is too long to store."""
    parts: list[str] = []
    rest = text.strip()
    while len(rest) > limit:
        cut = max(rest.rfind(sep, limit // 2, limit) for sep in ("\n\n", "\n", " "))
        cut = cut if cut > 0 else limit
        parts.append(rest[:cut].strip())
        rest = rest[cut:].strip()
    if rest:
        parts.append(rest)
    return parts


@dataclass
class Reply:
    """What posting the agent's answer found: the message (None, and nothing posted, when a person
    had taken the ticket or closed it), and whether a customer message was waiting unanswered."""

    message: Message | None
    customer_waiting: bool


def reply_post(
    *,
    lease: Lease,
    run: AgentRun,
    step: ModelStep,
    stream: int | None = None,
    fresh: bool = False,
    read_at: datetime | None = None,
) -> Reply:
    """Post the model's final answer; keyed by the step, so a crash and retry posts it once.
    Nothing is posted when a person has taken the ticket (or closed it) meanwhile, or answered
    the customer after the conversation the answer was written from was read (``read_at``; else
    when the step started).

    An answer longer than one message may be is posted whole, as consecutive messages.
    ``stream``: the id its text was streamed under, so a watcher drops that stream's bubble.
    ``fresh``: posted in the transaction that stores the step, so it cannot have been posted before."""
    parts = split_reply(step.response_text, ticket_services.MESSAGE_MAX_CHARS)
    posted: list[Message] = []
    with lease.guard():
        # A customer who wrote while this answer was being written is not waited on: their turn comes next.
        status, unanswered, person_answered, key, last_seq = ticket_locked_for_reply(
            ticket_id=run.ticket_id, since=min(read_at or step.started_at, step.started_at), after_seq=step.read_seq
        )
        # Whether a person took the ticket since the run started is read from the timeline, unless no
        # one but this worker has written on it since the pass read it (and asked the same then).
        took = not lease.alone_since_read(last_seq) and person_took_the_ticket_since(run)
        if status in AGENT_STAYS_OUT or person_answered or took:
            # A person has the ticket, or answered the customer while this answer was being written
            # (and handed the ticket back): written before their reply, it is not the customer's to
            # read any more. (One written after it, with their reply in its conversation, is posted.)
            # Or a person resolved or closed it since the run started, and the customer reopened it
            # by writing: the run ended with the resolve; a new run answers what they wrote.
            return Reply(None, unanswered)
        ticket = Ticket(pk=run.ticket_id, status=status)
        for n, part in enumerate(parts):
            message, _ = ticket_services.message_post(
                ticket=run.ticket_id,
                author_kind=AuthorKind.AGENT,
                body=part,
                client_msg_id=f"reply:{run.pk}:{step.index}" + (f":{n + 1}" if n else ""),
                actor_ref=_actor(run),
                stream=stream,
                first_time=fresh,
                key=key if n == 0 else None,
            )
            posted.append(message)
        if ticket.status == TicketStatus.OPEN and not unanswered:
            ticket_services.ticket_transition_locked(
                ticket=ticket,
                to_status=TicketStatus.WAITING_ON_CUSTOMER,
                actor_kind=ActorKind.AGENT,
                actor_ref=_actor(run),
            )
    return Reply(posted[0] if posted else None, unanswered)


def run_end_for_person(
    *, lease: Lease, run: AgentRun, tokens: tuple[int, int, int] | None = None, nothing_waits: bool = False
) -> None:
    """The run ends unanswered because a person has the ticket (or answered meanwhile). What it was
    answering that no person has answered since is unanswered again: if they hand the ticket back
    without a word, the agent answers it; once they reply, their reply has answered it."""
    with lease.guard():
        run_transition(
            lease=lease, run=run, to_status=RunStatus.HANDED_OFF, outcome=PERSON_TOOK_OVER, tokens=tokens,
            nothing_waits=nothing_waits,
        )  # fmt: skip
        if not _handed_off_by_the_agent(run):
            _unanswered_again(run)


def _handed_off_by_the_agent(run: AgentRun) -> bool:
    """Was the last change that took the ticket from the agent since ``run`` started the agent's own
    hand-off by its tool (the customer asked for a person, and was told they have one)? What the run
    answered is then answered: a hand-back does not make the agent hand it off again. Judged in the
    timeline's order, from the run's start event (not by clock times, which hosts write)."""
    started = TicketEvent.objects.filter(
        ticket_id=run.ticket_id, kind="agent_run_started", payload__run_id=run.pk
    ).values("seq")[:1]
    last = (
        TicketEvent.objects.filter(
            ticket_id=run.ticket_id,
            kind="status_changed",
            payload__to__in=sorted(AGENT_STAYS_OUT),
            seq__gt=Subquery(started),
        )
        .order_by("-seq")
        .values_list("actor_kind", flat=True)
        .first()
    )
    return last == ActorKind.AGENT


def runs_note_stopped(*, ticket_id: int) -> int:
    """In the transaction that gives the ticket back to the agent: mark its paused run if a person
    stopped it (``person_took_the_ticket_since``). The take-over's doorbell may have been lost, and
    with the ticket back with the agent, nothing else would make a pass end that run: the sweeper
    rings a marked run until one does (``selectors.tickets_with_agent_work``)."""
    stopped = [run.pk for run in AgentRun.objects.filter(ticket_id=ticket_id, status__in=PAUSED_RUN_STATUSES)
               if person_took_the_ticket_since(run)]  # fmt: skip
    return AgentRun.objects.filter(pk__in=stopped).update(stopped_by_person=True) if stopped else 0


def _unanswered_again(run: AgentRun) -> None:
    """What ``run`` was answering that no person has answered since is unanswered again: if staff
    hand the ticket back without a word, the agent answers it; once they reply, their reply has
    answered it (``tickets.services.staff_reply`` marks what it answers). A reply answers a message
    that comes before it on the timeline and that the page it was written on showed (its
    ``seen_seq``): one sent from a page read before the message does not (the person was told it
    waits), even if this run had taken it in."""
    if not run.input_message_ids:
        return
    taken = list(
        Message.objects.filter(pk__in=run.input_message_ids, agent_handled_at__isnull=False).values_list(
            "pk", flat=True
        )
    )
    if not taken:
        return
    written = dict(
        TicketEvent.objects.filter(
            ticket_id=run.ticket_id, kind="message", actor_kind=ActorKind.CUSTOMER, payload__message_id__in=taken
        ).values_list("payload__message_id", "seq")
    )
    replies = list(
        TicketEvent.objects.filter(
            ticket_id=run.ticket_id, kind="message", actor_kind=ActorKind.STAFF, is_public=True
        ).values_list("seq", "payload__seen_seq")
    )

    def answered(message_id: int) -> bool:
        seq = written.get(message_id)
        return seq is not None and any(r > seq and (seen is None or seen >= seq) for r, seen in replies)

    again = [pk for pk in taken if not answered(pk)]
    if again:
        Message.objects.filter(pk__in=again).update(agent_handled_at=None)


def hand_off(*, lease: Lease, run: AgentRun, reason: str) -> None:
    """Give the ticket to a person: internal note, status, and the run ends."""
    with lease.guard():
        ticket_services.message_post(
            ticket=run.ticket_id,
            author_kind=AuthorKind.SYSTEM,
            body=f"The agent stopped and handed this ticket to a person: {reason}",
            is_public=False,
            client_msg_id=f"handoff:{run.pk}",
            actor_ref=_actor(run),
        )
        # A ticket resolved meanwhile is reopened on the way: a person must see why the agent stopped.
        ticket_services.ticket_hand_to_person(
            ticket=run.ticket_id, reason=reason, actor_ref=_actor(run), actor_kind=ActorKind.AGENT
        )
        run_transition(lease=lease, run=run, to_status=RunStatus.HANDED_OFF, outcome=reason)
        _unanswered_again(run)


def _tell_customer(
    *, run: AgentRun | None = None, ticket_id: int = 0, body: str, key: str, event: str, payload: dict[str, Any]
) -> None:
    """A plain sentence for the customer (once per key) and the system event that says why: about
    ``run``, or about ``ticket_id`` when no run started. Caller: inside ``lease.guard()``."""
    ticket, actor = (run.ticket_id, _actor(run)) if run is not None else (ticket_id, "agent")
    ticket_services.message_post(
        ticket=ticket, author_kind=AuthorKind.SYSTEM, body=body, client_msg_id=key, actor_ref=actor
    )
    ticket_services.event_append(
        ticket=ticket, kind=event, actor_kind=ActorKind.SYSTEM, actor_ref=actor, payload=payload
    )


def escalate(*, lease: Lease, run: AgentRun, call: ToolCall, customer_text: str | None, reason: str) -> None:
    """A call ended in a way only a person can settle: tell the customer in plain words, hand off.
    ``customer_text`` None: the customer was told already (by the reconciler); they are not told twice."""
    with lease.guard():
        payload = {"call_id": call.pk, "tool": call.name, "status": call.status, "reason": reason[:500]}
        if customer_text is None:
            ticket_services.event_append(
                ticket=run.ticket_id, kind="tool_call_escalated", actor_kind=ActorKind.SYSTEM,
                actor_ref=_actor(run), payload=payload,
            )  # fmt: skip
        else:
            _tell_customer(
                run=run, body=customer_text, key=f"escalation:{call.pk}", event="tool_call_escalated", payload=payload
            )
        hand_off(lease=lease, run=run, reason=f"{call.name} needs a person: {reason}")


def max_failures() -> int:
    """Failures in a row (of any kind) before the ticket is parked with a person."""
    return max(1, settings.AGENT_MAX_CONSECUTIVE_FAILURES)


def run_record_failure(*, lease: Lease, run: AgentRun, error: str) -> int:
    """Count a failed step on the run, with its error. Returns the failures in a row so far."""
    error = clean_text(error)  # an exception's words: a failure is counted whatever they hold
    with lease.guard():
        AgentRun.objects.filter(pk=run.pk).update(failures=F("failures") + 1, last_error=error[:2000])
        run.failures = AgentRun.objects.values_list("failures", flat=True).get(pk=run.pk)
        run.last_error = error[:2000]
        ticket_services.event_append(
            ticket=run.ticket_id,
            kind="agent_step_failed",
            actor_kind=ActorKind.SYSTEM,
            actor_ref=_actor(run),
            payload={"run_id": run.pk, "failures": run.failures, "error": error[:500]},
        )
    return run.failures


def run_retry_after(*, lease: Lease, run: AgentRun, seconds: float) -> None:
    """The sweeper leaves the run alone until its backoff is over (the retry is scheduled).

    The end of the wait is on the database's clock, as it is read (``selectors.in_backoff``, the
    sweeper), so that a host whose clock is off neither holds the run past its wait nor cuts it short.
    """
    with lease.guard():
        ends = Now() + timedelta(seconds=seconds)
        AgentRun.objects.filter(pk=run.pk).update(retry_not_before=ends)
        run.retry_not_before = AgentRun.objects.values_list("retry_not_before", flat=True).get(pk=run.pk)


def run_reset_failures(*, lease: Lease, run: AgentRun) -> None:
    """Progress (a call done, a step stored after a take-over): the failures so far were not in a row,
    and an outage under way is over."""
    if not run.failures and run.retry_not_before is None and run.outage_since is None:
        return
    with lease.guard():
        AgentRun.objects.filter(pk=run.pk).update(
            failures=0, retry_not_before=None, outage_since=None, outage_failures=0
        )
    run.failures, run.retry_not_before, run.outage_since, run.outage_failures = 0, None, None, 0


def run_outage_over(*, lease: Lease, run: AgentRun) -> None:
    """The dependency answered again (a model step stored): the outage under way is over; a later one
    gets the whole patience again. The failures about the ticket stay counted.
    Caller: inside the step's fenced transaction."""
    if run.outage_since is None:
        return
    with lease.guard():
        AgentRun.objects.filter(pk=run.pk).update(outage_since=None, outage_failures=0)
    run.outage_since, run.outage_failures = None, 0


@dataclass
class Outage:
    """An outage failure counted on a run: the tries failed in it so far, how long it has lasted (on the
    database's clock), and whether that is still within the patience."""

    tries: int
    lasted: float
    within: bool


def run_record_outage(*, lease: Lease, run: AgentRun, error: str, patience: int) -> Outage:
    """Count a failure that is an outage of a dependency (``agents.outage``): not among the failures in a
    row about the ticket, but on the outage under way, which starts now (the database's clock) if none
    is. Whether it is still within ``patience`` seconds of its first failure is read there too."""
    error = clean_text(error)
    with lease.guard():
        [(since, tries, lasted)] = reads.fetch(
            "UPDATE agents_agentrun SET outage_since = COALESCE(outage_since, now()), "
            "outage_failures = outage_failures + 1, last_error = %s WHERE id = %s "
            "RETURNING outage_since, outage_failures, extract(epoch FROM now() - outage_since)",
            [error[:2000], run.pk],
        )
        run.outage_since, run.outage_failures, run.last_error = since, tries, error[:2000]
        outage = Outage(tries=tries, lasted=float(lasted or 0), within=float(lasted or 0) < patience)
        ticket_services.event_append(
            ticket=run.ticket_id,
            kind="agent_step_failed",
            actor_kind=ActorKind.SYSTEM,
            actor_ref=_actor(run),
            payload={
                "run_id": run.pk, "failures": run.failures, "outage": True, "outage_tries": tries,
                "outage_seconds": round(outage.lasted, 1), "error": error[:500],
            },
        )  # fmt: skip
    return outage


DELAYED_NOTE = (
    "Sorry for the wait: a service we rely on is not answering right now. Your message is not lost; "
    "we will answer here as soon as it is back, with nothing more for you to do."
)


def tell_delayed(*, lease: Lease, run: AgentRun, error: str, tries: int) -> None:
    """Tell the customer, once for the run, that the answer is delayed by an outage (not each try)."""
    with lease.guard():
        _tell_customer(
            run=run,
            body=DELAYED_NOTE,
            key=f"delayed:{run.pk}",
            event="agent_delayed",
            payload={"run_id": run.pk, "outage_tries": tries, "error": clean_text(error)[:500]},
        )


def tell_delayed_unstarted(*, lease: Lease, ticket_id: int, error: str, counted: TicketEvent) -> None:
    """Tell the customer, once for the outage, that the answer is delayed when the outage keeps a run
    from starting at all (``run_start_failed``), as ``tell_delayed`` does for one that hits a run.
    ``counted``: the failed start's event, which names the outage by its first failure's time."""
    since = counted.payload.get("outage_since", counted.pk)
    with lease.guard():
        _tell_customer(
            ticket_id=ticket_id,
            body=DELAYED_NOTE,
            key=f"delayed:start:{since}"[:100],
            event="agent_delayed",
            payload={
                "run_id": None, "outage_tries": counted.payload.get("outage_tries"), "error": clean_text(error)[:500],
            },
        )  # fmt: skip


PARKED_NOTE = "Sorry, something went wrong on our side. A person from our team will reply in this chat."


def park(*, lease: Lease, run: AgentRun, error: str, failures: int) -> None:
    """Too many failures in a row: the run ends failed and a person takes the ticket.

    Staff read the error in an internal note; the customer reads a plain sentence; the
    sweeper leaves the ticket alone (a person has it) until staff hand it back.
    """
    error = clean_text(error)  # an exception's words: a failure is counted whatever they hold
    with lease.guard():
        ticket_services.message_post(
            ticket=run.ticket_id,
            author_kind=AuthorKind.SYSTEM,
            body=f"The agent stopped after {failures} failure(s) in a row and parked this ticket with a person. "
            f"Last error: {error[:1500]}",
            is_public=False,
            client_msg_id=f"parked-note:{run.pk}",
            actor_ref=_actor(run),
        )
        _tell_customer(
            run=run,
            body=PARKED_NOTE,
            key=f"parked:{run.pk}",
            event="agent_parked",
            payload={"run_id": run.pk, "failures": failures, "error": error[:500]},
        )
        ticket_services.ticket_hand_to_person(ticket=run.ticket_id, reason=f"the agent failed: {error[:200]}")
        _unanswered_again(run)  # after staff hand the ticket back, the agent answers them afresh
        run_transition(lease=lease, run=run, to_status=RunStatus.FAILED, outcome=f"parked: {error[:500]}")


def run_start_failed(
    *,
    lease: Lease,
    ticket_id: int,
    error: str,
    backoff: Callable[[int], float],
    outage_patience: int = 0,
    outage_backoff: Callable[[int], float] | None = None,
) -> tuple[int, TicketEvent, float | None]:
    """Starting a run failed, so there is no run to count it on: it is counted on the ticket's
    timeline, in a row since a run of the ticket last started or a person last had the ticket
    (``selectors.start_counted_since``). Below the limit the failure is backed off as a failed
    step is (``run_retry_after``): the event keeps when the wait ends (``retry_not_before``, on the
    database's clock, as ``selectors._start_waits`` reads it), and until then neither the sweeper
    nor a doorbell tries the start again (each such try counted another failure, so a brief outage
    parked the ticket within a few sweeps). ``backoff``: the wait after so many failures. Returns
    the failures in a row, the event, and the wait (None at the limit: the caller parks the ticket).

    ``outage_patience`` (seconds, 0: none): the failure is an outage of a dependency (``agents.outage``),
    not counted among the failures in a row but on the outage under way (its first failure's time and
    its tries, kept in the events): backed off by ``outage_backoff`` (of the tries) while the outage
    has lasted less than that, and the tries returned in place of the failures."""
    error = clean_text(error)  # an exception's words: a failure is counted whatever they hold
    with lease.guard():
        last = start_counted_since(ticket_id).order_by("-seq").values_list("kind", "payload").first()
        before = last[1] if last is not None and last[0] == START_FAILED else {}
        failures = int(before.get("failures", 0)) + (0 if outage_patience else 1)
        payload: dict[str, Any] = {"failures": failures, "error": error[:500]}
        if "outage_since" in before:  # an outage under way goes on (a failure about the ticket meanwhile)
            payload.update(outage_since=before["outage_since"], outage_tries=before.get("outage_tries", 0))
        if outage_patience and outage_backoff is not None:
            [(now,)] = reads.fetch("SELECT now()", [])
            since = datetime.fromisoformat(payload.get("outage_since") or now.isoformat())
            tries = int(payload.get("outage_tries", 0)) + 1
            lasted = (now - since).total_seconds()
            payload.update(outage=True, outage_since=since.isoformat(), outage_tries=tries)
            failures = tries
            seconds = outage_backoff(tries) if lasted < outage_patience else None
        else:
            seconds = backoff(failures) if failures < max_failures() else None
        if seconds is not None:
            ends = reads.fetch("SELECT now() + make_interval(secs => %s)", [seconds])[0][0]
            payload.update(retry_in=seconds, retry_not_before=ends.isoformat())
        event = ticket_services.event_append(
            ticket=ticket_id, kind=START_FAILED, actor_kind=ActorKind.SYSTEM, actor_ref="agent", payload=payload
        )
    return failures, event, seconds


def park_unstarted(*, lease: Lease, ticket_id: int, error: str, failures: int, counted: TicketEvent) -> None:
    """Too many failures in a row starting a run: a person takes the ticket, as ``park`` does for
    a run. The customer's messages stay unanswered (no run took them in): after staff hand the
    ticket back, the agent answers them. ``counted``: the last failure's event (the keys' part)."""
    error = clean_text(error)  # an exception's words: a failure is counted whatever they hold
    with lease.guard():
        ticket_services.message_post(
            ticket=ticket_id,
            author_kind=AuthorKind.SYSTEM,
            body=f"The agent could not start on this ticket after {failures} failure(s) in a row and parked it "
            f"with a person. Last error: {error[:1500]}",
            is_public=False,
            client_msg_id=f"parked-note:start:{counted.pk}",
            actor_ref="agent",
        )
        _tell_customer(
            ticket_id=ticket_id,
            body=PARKED_NOTE,
            key=f"parked:start:{counted.pk}",
            event="agent_parked",
            payload={"run_id": None, "failures": failures, "error": error[:500]},
        )
        ticket_services.ticket_hand_to_person(ticket=ticket_id, reason=f"the agent could not start: {error[:200]}")


WAITING_NOTE = (
    "Thanks, we got your message. Your earlier request is still under review by our team; "
    "we will answer everything here as soon as it is decided."
)


def acknowledge_while_paused(*, lease: Lease, run: AgentRun, note: str = WAITING_NOTE) -> int:
    """Tell a customer who writes during a pause (a staff approval, their own confirmation) that
    their message is queued.

    One system message per customer message (keyed by it), and the messages stay
    unhandled, so the turn after the decision answers them.
    """
    waiting = list(unanswered_messages(ticket_id=run.ticket_id).values_list("pk", flat=True))
    # Told once per message, whatever the pause was (a message told during the staff review is not
    # told again while the customer's Confirm is awaited).
    told = set(
        Message.objects.filter(
            ticket_id=run.ticket_id, client_msg_id__in=[f"waiting:{pk}" for pk in waiting]
        ).values_list("client_msg_id", flat=True)
    )
    posted = 0
    for message_id in (pk for pk in waiting if f"waiting:{pk}" not in told):
        with lease.guard():
            _, created = ticket_services.message_post(
                ticket=run.ticket_id,
                author_kind=AuthorKind.SYSTEM,
                body=note,
                client_msg_id=f"waiting:{message_id}",
                actor_ref=_actor(run),
            )
        posted += int(created)
    return posted
