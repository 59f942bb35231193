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

import json
import logging
import random
import time
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.db import connection
from django.utils import timezone

from agents import faults
from agents import services as agent_services
from agents.confirmation import acknowledge_while_confirming
from agents.execution import Stop, ToolCrashed, record_intents, run_calls
from agents.lease import Lease, LeaseLost, lease_acquire_and_read, worker_identity
from agents.llm import (
    ChatModel,
    ModelError,
    StreamMeter,
    complete_within_step,
    validate_response,
    wasted_tokens,
)
from agents.model_factory import get_model
from agents.models import PAUSED_RUN_STATUSES, AgentProfile, AgentRun, RunStatus, StepStatus
from agents.outage import is_outage, outage_delay, patience_seconds
from agents.pass_state import Pass, stream_id
from agents.profiles import policy_tables_from, policy_tables_sql, profile_for_new_run, profile_of
from agents.recovery import owner_stopped, recover
from agents.selectors import (
    active_run_and_profile,
    active_run_and_profile_from,
    active_run_and_profile_sql,
    decided_calls,
    in_backoff,
    messages_not_told_to_wait,
    person_took_the_ticket_since,
    start_backing_off_from,
    start_backing_off_sql,
    ticket_has_agent_work,
)
from agents.tools import tool_specs
from support.storable import clean_piece
from tickets import realtime
from tickets.models import AGENT_STAYS_OUT, Ticket
from tickets.selectors import (
    has_unanswered_messages,
    person_answered_after,
    ticket_with_customer,
    ticket_with_customer_from,
    ticket_with_customer_sql,
    unanswered_question,
)

logger = logging.getLogger(__name__)


def max_steps() -> int:
    return settings.AGENT_MAX_STEPS


def token_budget() -> int:
    return settings.AGENT_TOKEN_BUDGET


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
    # The lease, then (in the same round trip) the ticket, its active run, the active profile, the
    # approval policy tables (a new run checks that they were not made stricter outside the admin) and
    # whether a new run's start waits out the backoff of a failed one.
    lease, (found, *run_and_profile, tables, start_waits) = lease_acquire_and_read(
        ticket_id=ticket_id,
        owner=worker_identity(),
        then=[
            ticket_with_customer_sql(ticket_id),
            *active_run_and_profile_sql(ticket_id),
            policy_tables_sql(),
            start_backing_off_sql(ticket_id),
        ],
    )
    ticket = ticket_with_customer_from(found)
    if lease is None:
        return Outcome("busy" if ticket is not None else "missing")
    if ticket is None:  # deleted meanwhile
        lease.release()
        return Outcome("missing")
    first_read: tuple[Any, ...] | None = (
        *active_run_and_profile_from(*run_and_profile),
        policy_tables_from(tables),
        start_backing_off_from(start_waits),
    )
    lease.start_heartbeat()
    outcome = Outcome("idle")
    unanswered = None
    going_down = False
    try:
        chosen = model  # a test's or a benchmark's model; otherwise each run's profile names it
        for _ in range(20):  # bounded: each pass finishes or pauses a run
            if outcome.runs:
                ticket = ticket_with_customer(ticket_id=ticket_id)
            lease.watch(ticket.last_event_seq)  # whatever others write from here is seen by the lease
            try:
                run, person = _current_run(lease, ticket, chosen, first_read)
            except (LeaseLost, RetryLater, Stop):
                raise
            except Exception as exc:  # noqa: BLE001 - taking a run up fails like a step of it: counted
                taken_up = _run_being_taken_up(ticket_id)
                outcome.state = _failed(lease, taken_up, exc) if taken_up else _start_failed(lease, ticket_id, exc)
                break
            first_read = None
            if run is None:
                break
            outcome.runs += 1
            waiting = None
            try:
                # A run a person has had since it started only ends: no model is built for it.
                model = None if person else chosen or model_of(profile_of(run))
                state, waiting = _drive(lease, ticket, run, model, person)
            except (LeaseLost, RetryLater, Stop):
                raise
            except Exception as exc:  # noqa: BLE001 - every failure is recorded and counted, none loops
                state = _failed(lease, run, exc)
            outcome.state = state
            # A message that came in during the run is answered by the next one, under this lease. (The
            # reply saw whether one had; one that comes after it is seen when the lease is released.)
            if waiting is None and state == RunStatus.COMPLETED:
                waiting = has_unanswered_messages(ticket_id=ticket_id)
            if state != RunStatus.COMPLETED or not waiting:
                break
    except LeaseLost:
        logger.warning("ticket %s: lease lost (epoch %s); another worker carries on", ticket_id, lease.epoch)
        return Outcome("lease_lost", outcome.runs)
    except RetryLater as retry:
        outcome = Outcome("retry", outcome.runs, retry_in=retry.seconds)
    except Stop:
        outcome.state = RunStatus.HANDED_OFF
    except BaseException as exc:
        # Not a failure of the pass (those are Exceptions, counted above) but the process going down:
        # Celery's cold shutdown raises SystemExit in the task it runs, maybe in the middle of a call.
        # The lease is left owned, as a killed worker leaves it, so the next worker takes it over from
        # a stopped owner: recovery settles the call by its replay policy and the stop is counted.
        going_down = not isinstance(exc, Exception)
        raise
    finally:
        faults.hit("before_lease_release")
        lease.stop_heartbeat()
        if going_down:
            _let_go_going_down(lease)
        elif not lease.lost:
            # Asked by the statement that releases the lease, after releasing it: a message whose
            # doorbell found the lease held is seen here (DESIGN.md, the loop, step 5).
            unanswered = lease.release(ask=unanswered_question(ticket_id=ticket_id))
        else:
            lease.unlock()
    # New input that arrived while we held the lease: the task rings again. After a reply, the only
    # work that can have come in is a customer message.
    if outcome.retry_in is None:
        completed = outcome.state == RunStatus.COMPLETED
        outcome.more_work = bool(unanswered) if completed else has_pending_work(ticket_id)
        if unanswered and outcome.state in PAUSED_RUN_STATUSES and not outcome.more_work:
            outcome.more_work = messages_not_told_to_wait(ticket_id=ticket_id)
    return outcome


def _let_go_going_down(lease: Lease) -> None:
    """The advisory lock only, and never an error in place of the one taking the process down (the
    lock goes with the session anyway)."""
    try:
        lease.unlock()
    except Exception:  # noqa: BLE001 - the session's end lets go of it
        logger.warning("ticket %s: the lease's lock is left to the session's end", lease.ticket_id, exc_info=True)


def _run_being_taken_up(ticket_id: int) -> AgentRun | None:
    """The run a pass failed to take up (resuming it after a decision, telling a customer who wrote
    during its pause that their message waits): its failure counts on it, as a failed step's does,
    and the ticket is parked at the limit instead of failing on every sweep (invariant 14)."""
    connection.close_if_unusable_or_obsolete()
    return active_run_and_profile(ticket_id=ticket_id)[0]


def _start_failed(lease: Lease, ticket_id: int, exc: Exception) -> str:
    """Starting a new run failed (choosing its profile, taking the messages in): there is no run to
    count it on, so it is counted on the ticket, backed off like a failed step, and the ticket is
    parked with a person at the limit, instead of failing the task on every sweep (invariant 14)."""
    logger.exception("ticket %s: the agent could not start a run", ticket_id)
    error = f"{type(exc).__name__}: {exc}"
    connection.close_if_unusable_or_obsolete()  # a database error may have left it unusable
    failures, counted, delay = agent_services.run_start_failed(
        lease=lease,
        ticket_id=ticket_id,
        error=error,
        backoff=retry_delay,
        outage_patience=patience_seconds() if is_outage(exc) else 0,
        outage_backoff=outage_delay,
    )
    if delay is None:
        agent_services.park_unstarted(lease=lease, ticket_id=ticket_id, error=error, failures=failures, counted=counted)
        return "parked"
    if counted.payload.get("outage") and failures == agent_services.max_failures():
        # As a run's outage is told (``_outage``): once, when it has lasted the failure limit.
        agent_services.tell_delayed_unstarted(lease=lease, ticket_id=ticket_id, error=error, counted=counted)
    raise RetryLater(delay) from exc


def has_pending_work(ticket_id: int) -> bool:
    """Is there something for the agent to do on this ticket? (Asked after the lease is released:
    if another worker has taken it meanwhile, the ring finds it busy and costs nothing.)"""
    return ticket_has_agent_work(ticket_id)


def model_of(profile: AgentProfile) -> ChatModel:
    """The adapter a profile version names, with its model parameters: built once per process, name
    and parameters."""
    key = (profile.model, json.dumps(profile.model_parameters, sort_keys=True, default=str))
    model = _models.get(key)
    if model is None:
        model = _models[key] = get_model(profile.model, parameters=profile.model_parameters)
    return model


_models: dict[tuple[str, str], ChatModel] = {}


def _current_run(
    lease: Lease, ticket: Ticket, chosen: ChatModel | None, read: tuple[Any, ...] | None = None
) -> tuple[AgentRun | None, bool]:
    """The run to carry on, or a new one; ``read``: the active run and profile, the policy tables and
    whether a new run's start waits out a backoff, when just read. And whether a person has had the
    ticket since the run started: such a run only ends."""
    # Not read again after a run of this pass: it started, so no failed start's backoff is in force.
    run, profile, tables, start_waits = read or (*active_run_and_profile(ticket_id=lease.ticket_id), None, False)
    if run is not None:
        person = ticket.status in AGENT_STAYS_OUT or person_took_the_ticket_since(run)
        if not person and in_backoff(run):
            # Rung during its wait (a customer wrote, a decision came): the scheduled retry, or the
            # sweeper once the wait is over, carries it on; the model is not asked early. A paused run
            # waits too when taking it up failed: each ring during the wait was another failure.
            return None, False
        if run.status in PAUSED_RUN_STATUSES and not person:
            if not decided_calls(run=run).exists():
                # Paused: nothing but rows until a decision rings the doorbell. A customer
                # who writes meanwhile is told so once; the run answers them after the decision.
                if run.status == RunStatus.WAITING_CONFIRMATION:
                    acknowledge_while_confirming(lease=lease, run=run)
                else:
                    agent_services.acknowledge_while_paused(lease=lease, run=run)
                return None, False
            agent_services.run_transition(lease=lease, run=run, to_status=RunStatus.RUNNING, outcome="resumed")
            # Staff may have moved the paused run to another version since it was read; now that it
            # runs it can no longer be moved: the pass decides by the version it is pinned to now.
            run.refresh_from_db(fields=["profile"])
        return run, person
    if ticket.status in AGENT_STAYS_OUT:
        return None, False
    if start_waits:
        # Rung during the backoff of a failed start (a customer wrote, a sweep): the scheduled retry,
        # or the sweeper once the wait is over, tries again; this ring is not another failure.
        return None, False
    profile = profile_for_new_run(profile, tables)  # the version this run keeps to its end
    try:
        model_name = (chosen or model_of(profile)).name
    except Exception:  # noqa: BLE001 - counted where the run builds it again, in the pass's own try
        # A model this deployment cannot build (a class gone, a setting missing) is a failure of the
        # run like any other: the run starts, fails, backs off, and is parked after the limit.
        model_name = profile.model
    return agent_services.run_start(lease=lease, ticket=ticket, model_name=model_name, profile=profile), False


# --- driving a run ----------------------------------------------------------------------


def _drive(
    lease: Lease, ticket: Ticket, run: AgentRun, model: ChatModel | None, person: bool = False
) -> tuple[str, bool | None]:
    """Carry the run on until it replies, pauses, hands off or fails: its state, and whether a
    customer message was waiting when it replied (None if the pass does not know). ``person``:
    a person has had the ticket since the run started (the run only ends)."""
    # A stopped owner is counted before the ledger is read: a ledger whose reading stops every
    # worker that takes it on is counted too, and parked at the limit.
    counted, limit = (False, None) if person or ticket.status in AGENT_STAYS_OUT else owner_stopped(lease, run)
    p = Pass.load(lease, ticket, run)
    p.counted_a_stop, p.stop_limit = counted, limit
    return _carry_on(p, model, person), p.customer_waiting


def _carry_on(p: Pass, model: ChatModel | None, person: bool = False) -> str:
    """Reads top to bottom: recover, then step by step: run the calls the last step asked for,
    check the limits, ask the model, store its answer (with the reply, when it is one)."""
    lease, ticket, run = p.lease, p.ticket, p.run
    if person or ticket.status in AGENT_STAYS_OUT:
        # A person took the ticket over (or resolved or closed it) while this run was unfinished, even if
        # the customer has reopened it since: what a dead worker left is written down, nothing runs
        # again, the calls it left waiting are closed, and the run ends.
        recover(p, rerun=False)
        agent_services.run_end_for_person(lease=lease, run=run)
        return RunStatus.HANDED_OFF
    recover(p)
    read_just_now = True  # the conversation: nothing has happened since it was read
    try:
        while True:
            last = p.last_completed()
            if last is not None and last.tool_calls:
                read_just_now = False
                state = run_calls(p, last)
                if state is not None:
                    return state
            elif last is not None:
                # Stored by a worker that stopped before posting it (an older worker's ledger).
                if last.response_text.strip():
                    reply = agent_services.reply_post(lease=lease, run=run, step=last)
                    if reply.message is None:
                        # Not posted after all (a person has the ticket, or answered since it was
                        # written): the run ends for them, and what it took in that they did not
                        # answer is the agent's again after a hand-back, as for a fresh answer.
                        agent_services.run_end_for_person(lease=lease, run=run)
                        return RunStatus.HANDED_OFF
                agent_services.run_transition(lease=lease, run=run, to_status=RunStatus.COMPLETED, outcome="replied")
                return RunStatus.COMPLETED
            limit = _limit_reached(p)
            if limit:
                p.flush_outcomes()
                agent_services.hand_off(lease=lease, run=run, reason=limit)
                return RunStatus.HANDED_OFF
            if (
                not read_just_now
                and not lease.alone_since_read()
                and p.read_seq is not None
                and person_answered_after(ticket_id=ticket.pk, seq=p.read_seq)
            ):
                # A person answered the customer (and handed the ticket back) since the conversation
                # was read: the next step is written with their reply in it (DESIGN.md, invariant 12).
                # Asked only once someone else has written on the ticket's timeline, which each of
                # the pass's own commits tells it at no cost. One who writes after the pass's last
                # commit, while a call runs, is in no request until the next read: nothing a step
                # written before it asks to say to the customer goes out (the answer's own check, and
                # post_reply's and the email tool's, by the step's read_seq).
                p.flush_outcomes()
                p.reload()
            if not lease.alone_since_read() and person_took_the_ticket_since(run):
                # A person took the ticket (or resolved or closed it) while this pass ran the calls of
                # a step: the model is not asked again, nor the customer shown what it would do next.
                p.flush_outcomes()
                agent_services.run_end_for_person(lease=lease, run=run)
                return RunStatus.HANDED_OFF
            read_just_now = False
            state = _ask_model(p, model)
            if state is not None:
                return state
    finally:
        if not lease.lost:
            p.flush_outcomes()


def _limit_reached(p: Pass) -> str:
    # Every model call counts, failed ones too, but for those the endpoint never answered (an outage:
    # bounded by AGENT_OUTAGE_PATIENCE_SECONDS instead, and no step of the ticket's).
    if sum(1 for s in p.run_steps if not s.outage) >= max_steps():
        return f"step limit reached ({max_steps()} steps)"
    if p.tokens_used() >= token_budget():
        return f"token budget reached ({token_budget()} tokens)"
    return ""


def _ask_model(p: Pass, model: ChatModel) -> str | None:
    """One model step: stream the answer, then store it in one transaction with the outcomes of
    the calls before it, the intents of the calls it asks for, and the reply if it is one."""
    lease, run = p.lease, p.run
    index = p.next_index()
    attempt = p.attempts_at(index) + 1
    prefix, delta = p.request_delta()
    messages = p.conversation
    stream = stream_id(run.pk, index, attempt)
    streamed = 0
    started_at = timezone.now()
    begun = time.monotonic()  # how long ago it began is what the stream compares, on Redis's clock
    # Whatever the adapter, no text past the longest accepted reply reaches the customer's chat.
    meter = StreamMeter()

    held = ""  # the first half of an emoji whose second half is in the next piece (clean_piece)

    def on_token(text: str) -> None:
        nonlocal streamed, held
        meter.add_text(text)
        meter.check_time()
        # As the reply will be stored (validate_response): half an emoji could be neither kept nor sent,
        # and failed the step.
        text, held = clean_piece(held, text)
        if text:
            realtime.stream_token(run.ticket_id, stream, streamed, text, begun=begun)
            streamed += len(text)
        faults.hit("mid_stream")

    step_fields = {
        "lease": lease, "run": run, "index": index, "attempt": attempt, "model_name": model.name,
        "request_prefix": prefix, "request_messages": delta, "started_at": started_at, "read_seq": p.read_seq,
    }  # fmt: skip
    try:
        specs = tool_specs(enabled=p.enabled_tools)
        response = validate_response(
            complete_within_step(model, messages=list(messages), tools=specs, on_token=on_token, meter=meter)
        )
    except ModelError as exc:
        wasted = exc.usage.total_tokens if exc.usage is not None else 0
        with lease.guard():
            p.save_outcomes()
            step = agent_services.step_store(
                **step_fields, status=StepStatus.FAILED, error=str(exc), wasted=max(wasted, wasted_tokens(streamed)),
                outage=is_outage(exc),
            )  # fmt: skip
        p.step_stored(step)
        if streamed:
            realtime.stream_dropped(run.ticket_id, stream)  # never posted: its words leave the page now
        raise  # counted by _failed
    state = None
    with lease.guard():
        p.save_outcomes()
        step = agent_services.step_store(**step_fields, response=response)
        p.step_stored(step)
        agent_services.run_outage_over(lease=lease, run=run)  # the model answered: an outage is over
        if p.counted_a_stop:
            # The step the stopped worker was on is done: the stop was the worker's (a deploy, a cut
            # network), not this step's. (Other failures are reset by a call done, not by a step.)
            p.counted_a_stop = False
            agent_services.run_reset_failures(lease=lease, run=run)
        if step.tool_calls:
            state = record_intents(p, step)
        else:
            reply = step.response_text.strip() and agent_services.reply_post(
                lease=lease, run=run, step=step, stream=stream if streamed else None, fresh=True, read_at=p.read_at
            )
            replied = not reply or reply.message is not None
            p.customer_waiting = reply.customer_waiting if reply else None
            state = RunStatus.COMPLETED if replied else RunStatus.HANDED_OFF
            if replied:
                agent_services.run_transition(
                    lease=lease, run=run, to_status=state, tokens=p.run_tokens(), outcome="replied", nothing_waits=True
                )
            else:
                agent_services.run_end_for_person(lease=lease, run=run, tokens=p.run_tokens(), nothing_waits=True)
    # After the commit: a watcher that connects now reads the reply from the ledger, not the buffer.
    if streamed:
        realtime.stream_finished(run.ticket_id, stream)
    faults.hit("after_step_stored")
    for _ in step.tool_calls:
        faults.hit("after_call_started")  # each call's intent is committed (with the step)
    if state is None and step.tool_calls and p.refused_as_asked:
        # No call of the answer could run as asked. The model reads why in its next step and may correct
        # itself; asking for such calls again right after is a failure in a row (a successful call resets
        # the count): a model, or a server's dialect, that repeats the mistake is parked with a person
        # after AGENT_MAX_CONSECUTIVE_FAILURES, not asked again and again until the step limit.
        p.refused_in_a_row += 1
        if p.refused_in_a_row > 1:
            error = f"the model asked again for tool calls that cannot run: {'; '.join(p.refused_as_asked)}"
            failures = agent_services.run_record_failure(lease=lease, run=run, error=error)
            if failures >= agent_services.max_failures():
                agent_services.park(lease=lease, run=run, error=error, failures=failures)
                return "parked"
    else:
        p.refused_in_a_row = 0
    return state


def _failed(lease: Lease, run: AgentRun, exc: Exception) -> str:
    """Record a failed step on the run; park the ticket with a person after too many in a row,
    else try again after a backoff. Returns the run's state, or raises RetryLater."""
    if isinstance(exc, ModelError):
        error = f"the model could not answer: {exc}"
    elif isinstance(exc, ToolCrashed):
        error = str(exc)
    else:
        logger.exception("ticket %s: the agent's step failed", run.ticket_id)
        error = f"{type(exc).__name__}: {exc}"
    # A database error may have left the connection unusable; the next query opens a new one.
    connection.close_if_unusable_or_obsolete()
    if is_outage(exc) and patience_seconds():
        return _outage(lease, run, exc, error)
    failures = agent_services.run_record_failure(lease=lease, run=run, error=error)
    permanent = isinstance(exc, ModelError) and not exc.retryable
    if permanent or failures >= agent_services.max_failures():
        agent_services.park(lease=lease, run=run, error=error, failures=failures)
        return "parked"
    delay = retry_delay(failures, getattr(exc, "retry_after", None))
    agent_services.run_retry_after(lease=lease, run=run, seconds=delay)
    raise RetryLater(delay) from exc


def _outage(lease: Lease, run: AgentRun, exc: Exception, error: str) -> str:
    """A dependency out of reach (``agents.outage``): nothing is wrong with the ticket, so the step is
    tried again with a capped backoff until AGENT_OUTAGE_PATIENCE_SECONDS have passed since the
    outage's first failure, and only then parked with a person. The customer is told once that the
    answer is delayed, when the outage has lasted as many tries as other failures are allowed."""
    outage = agent_services.run_record_outage(lease=lease, run=run, error=error, patience=patience_seconds())
    if not outage.within:
        error = f"out of reach for {outage.lasted:.0f} s (AGENT_OUTAGE_PATIENCE_SECONDS): {error}"
        agent_services.park(lease=lease, run=run, error=error, failures=outage.tries)
        return "parked"
    if outage.tries == agent_services.max_failures():
        agent_services.tell_delayed(lease=lease, run=run, error=error, tries=outage.tries)
    delay = outage_delay(outage.tries, getattr(exc, "retry_after", None))
    agent_services.run_retry_after(lease=lease, run=run, seconds=delay)
    raise RetryLater(delay) from exc
