"""Reads of the agent's ledger."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db.models import (
    BooleanField,
    CharField,
    DateTimeField,
    DurationField,
    Exists,
    ExpressionWrapper,
    F,
    OuterRef,
    Q,
    QuerySet,
    Subquery,
    Sum,
    Value,
)
from django.db.models.expressions import RawSQL
from django.db.models.fields.json import KT
from django.db.models.functions import Cast, Coalesce, Concat, Now

from agents.lease import LOCK_HELD_SQL
from agents.models import (
    ACTIVE_RUN_STATUSES,
    FINAL_CALL_STATUSES,
    PAUSED_CALL_STATUSES,
    PAUSED_RUN_STATUSES,
    RESERVING_REFUND_STATUSES,
    START_COUNTS_FROM,
    START_FAILED,
    AgentProfile,
    AgentRun,
    ApprovalDecision,
    CallStatus,
    ConfirmationDecision,
    Refund,
    RefundStatus,
    RunStatus,
    TicketLease,
    ToolCall,
)
from support import reads
from tickets.models import AGENT_STAYS_OUT, ActorKind, AuthorKind, Message, Order, Ticket, TicketEvent, TicketStatus
from tickets.selectors import person_answered_after_sql, unanswered_messages


def _active_run_sql(ticket_id: int) -> tuple[str, Any]:
    return reads.select_sql(AgentRun, "ticket_id = %s AND status = ANY(%s)", [ticket_id, list(ACTIVE_RUN_STATUSES)])


def active_run_and_profile(*, ticket_id: int) -> tuple[AgentRun | None, AgentProfile | None]:
    """The ticket's run that is not over (running or paused; there is at most one), and the active
    agent profile version (what a new run would keep), in one round trip; the profile is None when
    no version is active yet (agents.profiles makes one)."""
    return active_run_and_profile_from(*reads.fetch_together(active_run_and_profile_sql(ticket_id)))


def active_run_and_profile_sql(ticket_id: int) -> list[tuple[str, Any]]:
    """The two queries of ``active_run_and_profile``, to send along with others."""
    return [_active_run_sql(ticket_id), reads.select_sql(AgentProfile, "is_active", [])]


def active_run_and_profile_from(runs: Any, profiles: Any) -> tuple[AgentRun | None, AgentProfile | None]:
    run = reads.instances(AgentRun, runs)
    profile = reads.instances(AgentProfile, profiles)
    return (run[0] if run else None), (profile[0] if profile else None)


def decided_calls(*, run: AgentRun | None = None) -> QuerySet[ToolCall]:
    """Paused calls with a decision to apply: staff approved or rejected (or it expired), or the
    customer confirmed or cancelled (or did not answer in time). Only a call the run can reach: the
    calls of a step run in order, so a decision on one behind an earlier call that waits for its own
    decision (staff decided the second card first) waits with it. (An earlier call recorded to run
    does not hold it back: the run pauses on a step's first waiting call before running the others.)"""
    waiting_before = ToolCall.objects.filter(
        step_id=OuterRef("step_id"), index__lt=OuterRef("index"), status__in=PAUSED_CALL_STATUSES
    )
    calls = ToolCall.objects.filter(
        Q(status=CallStatus.AWAITING_APPROVAL, approval_decision__isnull=False)
        | Q(status=CallStatus.AWAITING_CONFIRMATION, confirmation_decision__isnull=False)
    ).exclude(Exists(waiting_before))
    if run is not None:
        return calls.filter(run=run)
    # A decision on a call whose run has ended (handed off to a person) has nothing left to apply.
    return calls.filter(run__status__in=ACTIVE_RUN_STATUSES)


def person_answered_after_step_read(*, step_id: int) -> bool:
    """Has a person written to the customer since the conversation this step was written from was
    read? By the timeline number kept with the step (``ModelStep.read_seq``); for a step kept before
    that number was, since the step started. Whatever the step asks to say to the customer is then
    written without the person's reply in view."""
    found = reads.fetch(
        f"SELECT CASE WHEN s.read_seq IS NOT NULL THEN {person_answered_after_sql('s.ticket_id', 's.read_seq')}"
        " ELSE EXISTS (SELECT 1 FROM tickets_message m WHERE m.ticket_id = s.ticket_id AND m.author_kind = %s "
        "AND m.is_public AND m.created_at > s.started_at) END FROM agents_modelstep s WHERE s.id = %s",
        [AuthorKind.STAFF, step_id],
    )
    return bool(found and found[0][0])


def person_took_the_ticket_since(run: AgentRun) -> bool:
    """Does a person have the ticket now (with a person, resolved or closed), or have they had it since
    this run started without handing it back to the agent? A customer who writes on a resolved ticket
    reopens it, and that gives nothing back to the run that waited through it; a member of staff who
    hands the ticket back gives back a run that was in the middle of a step (its worker carries on).
    A run that was paused (waiting for staff or for the customer's Confirm) when a person took the
    ticket, or that paused while a person had it, is stopped for good: what it waited for was
    withdrawn by that take-over, whether or not a worker ended the run before the hand-back. Read
    from the timeline, where each status change and each pause and resume of the run is written
    with the change itself."""
    if Ticket.objects.filter(pk=run.ticket_id, status__in=AGENT_STAYS_OUT).exists():
        return True
    started = TicketEvent.objects.filter(
        ticket_id=run.ticket_id, kind="agent_run_started", payload__run_id=run.pk
    ).values("seq")[:1]
    taking = Q(kind="status_changed") & (
        Q(payload__to__in=sorted(AGENT_STAYS_OUT)) | Q(payload__from=TicketStatus.WITH_HUMAN)
    )
    pausing = Q(
        kind__in=[f"agent_run_{status}" for status in (*PAUSED_RUN_STATUSES, RunStatus.RUNNING)], payload__run_id=run.pk
    )
    changes = (
        TicketEvent.objects.filter(ticket_id=run.ticket_id, seq__gt=Subquery(started))
        .filter(taking | pausing)
        .order_by("seq")
        .values_list("kind", "payload__to")
    )
    paused = taken = False
    for kind, to in changes:
        if kind != "status_changed":
            paused = kind != f"agent_run_{RunStatus.RUNNING}"
            if paused and taken:
                return True  # it paused (its step written) while a person had the ticket: stopped too
        elif to in AGENT_STAYS_OUT:
            if paused:
                return True  # taken while the run waited: what it waited for is withdrawn for good
            taken = True
        else:
            taken = False  # handed back while the run was in the middle of a step
    return taken


def customer_wrote_since_the_go_ahead(call: ToolCall, *, asks_the_customer: bool) -> bool:
    """Has the customer written since this call's last go-ahead, words nobody who let it go ahead
    read? Then it is not carried out: they may have asked to stop it ("please cancel the refund"),
    and nothing else reads their words before the effect. ``asks_the_customer``: the call's tool
    asks the customer's Confirm where that is on (a refund).

    - Confirmed by the customer: their Confirm is their own last word (nothing stops it).
    - Approved by staff: a message written after the decision (``customer_wrote_after_staff_approved``);
      the card showed those written before it.
    - Neither, for a tool that asks the customer's Confirm (turned off, or not asked): a message no
      turn has taken in yet. A run takes the customer's messages in when it starts, so the model that
      decided the call never read it (written while the step was written, or its calls ran, or the
      run waited for another call's decision)."""
    if call.confirmation_decision == ConfirmationDecision.CONFIRMED:
        return False
    if call.approval_decision == ApprovalDecision.APPROVED:
        return customer_wrote_after_staff_approved(call)
    if call.approval_decision is not None or call.confirmation_required or not asks_the_customer:
        return False
    return unanswered_messages(ticket_id=call.ticket_id).exists()


def customer_wrote_after_staff_approved(call: ToolCall) -> bool:
    """Has the customer written on the ticket since staff approved this call, when that approval is
    its last go-ahead (no Confirm of theirs came after it)? Then the call is not carried out on the
    approval: the customer may have asked to stop it ("please cancel the refund"), and nothing else
    reads their words between the decision and the effect. A Confirm pressed after the approval is
    the customer's own last word. By the timeline: the decision's event names the call (an event
    written before it did names nobody, and nothing is stopped by it)."""
    if call.approval_decision != ApprovalDecision.APPROVED or (
        call.confirmation_decision == ConfirmationDecision.CONFIRMED
    ):
        return False
    decided = (
        TicketEvent.objects.filter(
            ticket_id=call.ticket_id,
            kind="approval_decided",
            payload__call_id=call.pk,
            payload__decision=ApprovalDecision.APPROVED.value,
        )
        .order_by("-seq")
        .values("seq")[:1]
    )
    return TicketEvent.objects.filter(
        ticket_id=call.ticket_id,
        kind="message",
        actor_kind=ActorKind.CUSTOMER,
        is_public=True,
        seq__gt=Subquery(decided),
    ).exists()


# A backoff this close to its end is over for a worker that is rung: a worker whose clock runs a
# little behind the one that set the wait still carries the run on when its retry comes.
BACKOFF_SLACK = timedelta(seconds=1)


def in_backoff(run: AgentRun) -> bool:
    """Is ``run`` waiting out a backoff after a failed step, or a failure to take it up from its
    pause (its retry scheduled)? On the database's clock, as the wait was written
    (``services.run_retry_after``)."""
    if run.retry_not_before is None:
        return False
    return AgentRun.objects.filter(pk=run.pk, retry_not_before__gt=Now() + BACKOFF_SLACK).exists()


def start_counted_since(ticket_id: Any) -> QuerySet[TicketEvent]:
    """The ticket's events that failed starts are counted from, the failures among them: a run
    starting, the ticket parked, or a person getting the ticket (taking it over, resolving or closing
    it): whatever they did, handing it back gives the agent a fresh count, as a take-over ends a
    run and its failures. The last one says where the count stands. ``ticket_id``: a value, or an
    ``OuterRef``."""
    return TicketEvent.objects.filter(ticket_id=ticket_id).filter(
        Q(kind__in=START_COUNTS_FROM) | Q(kind="status_changed", payload__to__in=sorted(AGENT_STAYS_OUT))
    )


def _start_waits(ticket_id: Any, *, slack: timedelta = timedelta(0)) -> QuerySet[TicketEvent]:
    """The ticket's last failure to start a run, while its backoff is not over (``slack`` before its
    end counts as over): the last event that failed starts count from (``start_counted_since``) is
    that failure, and the end of its wait, on the database's clock (``services.run_start_failed``),
    is still to come. ``ticket_id``: a value, or an ``OuterRef`` to a ticket."""
    last = start_counted_since(OuterRef("ticket_id")).order_by("-seq").values("seq")[:1]
    ends = Cast(KT("payload__retry_not_before"), DateTimeField())  # none on a failure at the limit
    return (
        TicketEvent.objects.filter(ticket_id=ticket_id, kind=START_FAILED, seq=Subquery(last))
        .annotate(retry_ends=ends)
        .filter(retry_ends__gt=Now() + slack)
    )


# Read with the lease (agents.runner.advance): is a new run's start waiting out its backoff?
_start_waits_now = reads.Kept(lambda ticket_id: _start_waits(ticket_id, slack=BACKOFF_SLACK).values("pk"))


def start_backing_off_sql(ticket_id: int) -> tuple[str, Any]:
    """Whether starting a run on the ticket waits out the backoff of a failed start (as ``in_backoff``
    for a run, with its slack), to send along with other reads; its rows: ``start_backing_off_from``."""
    sql, params = _start_waits_now.sql(ticket_id)
    return f"SELECT EXISTS ({sql})", params


def start_backing_off_from(found: Any) -> bool:
    return bool(found[0][0])


def _with_agent_work(tickets: QuerySet[Ticket]) -> QuerySet[Ticket]:
    """The one definition of "work for the agent": unanswered customer messages (unless a run is
    paused, or starting one waits out the backoff of a failed start), a run to carry on (once its
    backoff is over), or a staff decision to apply; none while a person has the ticket or it is
    closed, except a run to carry on (it ends itself). Backoffs end on the database's clock, as they
    are written (``services.run_retry_after``, ``services.run_start_failed``)."""
    now = Now()
    unhandled = unanswered_messages().filter(ticket=OuterRef("pk"))
    # A run that failed waits out its backoff (its retry is scheduled); then the sweeper may ring it.
    running = AgentRun.objects.filter(ticket=OuterRef("pk"), status=RunStatus.RUNNING).exclude(retry_not_before__gt=now)
    decided = decided_calls().filter(ticket=OuterRef("pk"))
    paused = AgentRun.objects.filter(ticket=OuterRef("pk"), status__in=PAUSED_RUN_STATUSES)
    # A paused run a person stopped, the ticket given back before a pass ended it (its ring lost).
    stopped = paused.filter(stopped_by_person=True)
    # Messages sent while a run waits out its backoff are answered by that run when its wait is over;
    # a paused run whose taking up failed waits out its backoff too, with its decision.
    backing_off = AgentRun.objects.filter(
        ticket=OuterRef("pk"), status__in=ACTIVE_RUN_STATUSES, retry_not_before__gt=now
    )
    # A message sent during a pause whose writer was not told it waits (its doorbell was lost).
    told = Message.objects.filter(
        ticket_id=OuterRef("ticket_id"), client_msg_id=Concat(Value("waiting:"), Cast(OuterRef("pk"), CharField()))
    )
    untold = unanswered_messages().filter(ticket=OuterRef("pk")).exclude(Exists(told))
    # A run that could not be started waits out its backoff too (its retry is scheduled).
    start_waits = _start_waits(OuterRef("pk"))
    return tickets.annotate(
        unhandled=Exists(unhandled),
        running=Exists(running),
        paused=Exists(paused),
        stopped=Exists(stopped),
        decided=Exists(decided),
        backing_off=Exists(backing_off),
        start_waits=Exists(start_waits),
        untold=Exists(untold),
    ).filter(  # fmt: skip
        Q(running=True)
        # A person has the ticket, or had it: a run still waiting on it is ended (by the pass that finds it).
        | Q(paused=True, status__in=AGENT_STAYS_OUT)
        | Q(stopped=True)
        | (
            # A paused run waits for its decision; messages sent meanwhile wait with it, once their
            # writers are told so. A run waiting out its backoff is carried on by its scheduled retry,
            # decisions and messages with it; so is the start of a run that failed to start.
            (Q(decided=True) | Q(unhandled=True, paused=False) | Q(untold=True, paused=True))
            & Q(backing_off=False)
            & Q(start_waits=False)
            & ~Q(status__in=AGENT_STAYS_OUT)
        )
    )


def messages_not_told_to_wait(*, ticket_id: int) -> bool:
    """Is a customer message unanswered on the ticket without the note that tells its writer it
    waits for the paused run (``waiting:<id>``)? One sent while the pass that paused still held the
    lease found it busy: the paused ticket is rung again to tell them (once, so never a loop)."""
    waiting = list(unanswered_messages(ticket_id=ticket_id).values_list("pk", flat=True))
    told = Message.objects.filter(ticket_id=ticket_id, client_msg_id__in=[f"waiting:{pk}" for pk in waiting])
    return bool(waiting) and told.count() < len(waiting)


def tickets_with_agent_work(*, limit: int = 500) -> list[int]:
    """Tickets with work for the agent whose lease is free or expired (the sweeper rings them)."""
    # Expiry on the database's clock, as the lease writes it (agents.lease).
    held = TicketLease.objects.filter(ticket=OuterRef("pk"), expires_at__gt=Now()).exclude(owner="")
    # A lease whose owner took the advisory lock is held only while that session lives.
    held_unlocked = held.filter(session_locked=False)
    held_locked = held.filter(session_locked=True)
    candidates = (
        _with_agent_work(Ticket.objects.filter(pk__in=_tickets_that_may_have_agent_work()))
        .annotate(
            held_unlocked=Exists(held_unlocked),
            held_locked=Exists(held_locked),
            owner_alive=RawSQL(LOCK_HELD_SQL, [], output_field=BooleanField()),
        )
        .filter(held_unlocked=False)
        .exclude(held_locked=True, owner_alive=True)
        .order_by("updated_at")
        .values_list("pk", flat=True)[:limit]
    )
    return list(candidates)


def backoffs_ending(*, limit: int = 500, ticket_id: int | None = None) -> list[tuple[int, float]]:
    """Tickets waiting out a backoff (a failed step of their run, or a failed start), with the
    seconds left of the wait, on the database's clock, soonest first: the retry each wait's task
    scheduled is the only ring when it ends while beat is down (``tasks.ring_when_waits_end``).
    ``ticket_id``: that ticket's wait only."""
    left = ExpressionWrapper(F("ends") - Now(), output_field=DurationField())
    mine = Q() if ticket_id is None else Q(ticket_id=ticket_id)
    runs = (
        AgentRun.objects.filter(mine, status__in=ACTIVE_RUN_STATUSES, retry_not_before__gt=Now())
        .annotate(ends=F("retry_not_before"))
        .annotate(left=left)
        .values_list("ticket_id", "left")
    )
    starts = (
        Ticket.objects.filter(pk__in=unanswered_messages().values("ticket_id"))
        .filter(Q() if ticket_id is None else Q(pk=ticket_id))
        .annotate(ends=Subquery(_start_waits(OuterRef("pk")).values("retry_ends")[:1]))
        .filter(ends__isnull=False)
        .annotate(left=left)
        .values_list("pk", "left")
    )
    waits = sorted([*runs.order_by("retry_not_before")[:limit], *starts[:limit]], key=lambda wait: wait[1])
    return [(ticket_id, max(0.0, wait.total_seconds())) for ticket_id, wait in waits[:limit]]


def _tickets_that_may_have_agent_work() -> QuerySet[Any]:
    """The tickets ``_with_agent_work`` can find, as the union of its sources, each read
    through its own index: the sweep then looks at those tickets only, not at every ticket. (Ten
    thousand paused tickets made the planner expect a query costly enough to compile: 34 ms of
    JIT in a 47 ms sweep, every few seconds.)"""
    return (
        unanswered_messages().order_by().values("ticket_id")
        .union(
            AgentRun.objects.filter(status=RunStatus.RUNNING).order_by().values("ticket_id"),
            decided_calls().order_by().values("ticket_id"),
            AgentRun.objects.filter(status__in=PAUSED_RUN_STATUSES, ticket__status__in=AGENT_STAYS_OUT)
            .order_by().values("ticket_id"),
            AgentRun.objects.filter(status__in=PAUSED_RUN_STATUSES, stopped_by_person=True)
            .order_by().values("ticket_id"),
        )
    )  # fmt: skip


def ticket_has_agent_work(ticket_id: int) -> bool:
    """Has this ticket work for the agent (whoever holds its lease)?"""
    return _with_agent_work(Ticket.objects.filter(pk=ticket_id)).exists()


def failed_unseen() -> Q:
    """Refunds failed without the provider ever showing them, still asked about (for
    REFUND_RECHECK_FAILED_HOURS, ``agents.refunds.refund_recheck_failed``): a request still on its
    way may land yet, and is then recorded paid. Until then such a refund may still happen."""
    since = Now() - timedelta(hours=settings.REFUND_RECHECK_FAILED_HOURS)  # updated_at is on its clock
    return Q(status=RefundStatus.FAILED, provider_refund_id__isnull=True, updated_at__gte=since)


def _reserving_refunds() -> QuerySet[Refund]:
    """Refunds that count against what an order can still refund: done, pending or uncertain."""
    return Refund.objects.filter(status__in=RESERVING_REFUND_STATUSES)


def orders_with_refunded_total(orders: QuerySet[Order]) -> QuerySet[Order]:
    """The orders, each with ``refunded_cents`` (as ``refunded_total_cents``) and ``unseen_cents`` (as
    ``failed_unseen_cents``), in the same query."""

    def total(refunds: QuerySet[Refund]) -> Subquery:
        return Subquery(
            refunds.filter(order=OuterRef("pk")).values("order").annotate(total=Sum("amount_cents")).values("total")
        )

    return orders.annotate(
        refunded_cents=Coalesce(total(_reserving_refunds()), 0),
        unseen_cents=Coalesce(total(Refund.objects.filter(failed_unseen())), 0),
    )


_refunded_total = reads.Kept(
    lambda order_id: (
        _reserving_refunds()
        .filter(order_id=order_id)
        .order_by()
        .values("order")
        .annotate(total=Sum("amount_cents"))
        .values("total")
    )
)


def refunded_total_sql(order_id: int) -> tuple[str, list[Any]]:
    """``refunded_total_cents`` of the order as a query (no row when nothing counts, else its total),
    to send along with other reads (``support.reads.fetch_together``; ``refunded_total_from``)."""
    return _refunded_total.sql(order_id)


def refunded_total_from(found: list[tuple[Any, ...]]) -> int:
    return int(found[0][0] or 0) if found else 0


def refunded_total_cents(order: Order, *, exclude_key: str | None = None) -> int:
    """What has been (or may have been) refunded on this order: refunds done, pending or uncertain."""
    if exclude_key is None and hasattr(order, "refunded_cents"):
        return int(order.refunded_cents)  # read with the order (orders_with_refunded_total)
    refunds = _reserving_refunds().filter(order=order)
    if exclude_key:
        refunds = refunds.exclude(idempotency_key=exclude_key)
    return int(refunds.aggregate(total=Sum("amount_cents"))["total"] or 0)


def payment_left_cents(order: Order, *, exclude_key: str | None = None) -> int:
    """What the payment of ``order`` has left to refund by the ledger: what the orders it paid for cost
    (one payment may pay for several), less their refunds done, pending or uncertain."""
    together = Order.objects.filter(payment_reference=order.payment_reference)
    refunds = _reserving_refunds().filter(order__in=together)
    if exclude_key:
        refunds = refunds.exclude(idempotency_key=exclude_key)
    paid = int(together.aggregate(total=Sum("total_cents"))["total"] or 0)
    return paid - int(refunds.aggregate(total=Sum("amount_cents"))["total"] or 0)


def failed_unseen_total_sql(order_id: int) -> tuple[str, list[Any]]:
    """``failed_unseen_cents`` of the order as a query (no row when nothing counts, else its total), to
    send along with other reads (``support.reads.fetch_together``; ``refunded_total_from``). Compiled on
    each call, not kept: its window (REFUND_RECHECK_FAILED_HOURS) is one of its parameters."""
    refunds = (
        Refund.objects.filter(failed_unseen(), order_id=order_id)
        .order_by()
        .values("order")
        .annotate(total=Sum("amount_cents"))
        .values("total")
    )
    sql, params = refunds.query.get_compiler(refunds.db).as_sql()
    return sql, list(params)


def failed_unseen_cents(order: Order, *, exclude_key: str | None = None, whole_payment: bool = False) -> int:
    """What refunds failed without the provider ever showing them (``failed_unseen``) may still pay on
    this order, or on every order its payment paid for (``whole_payment``): a request still on its way
    may land, and is then recorded paid. Not among ``refunded_total_cents`` (nothing was refunded as far
    as anyone knows); counted against what is left to refund all the same (``agents.refunds``)."""
    if exclude_key is None and not whole_payment and hasattr(order, "unseen_cents"):
        return int(order.unseen_cents)  # read with the order (orders_with_refunded_total)
    refunds = Refund.objects.filter(failed_unseen())
    if whole_payment:
        refunds = refunds.filter(order__payment_reference=order.payment_reference)
    else:
        refunds = refunds.filter(order=order)
    if exclude_key:
        refunds = refunds.exclude(idempotency_key=exclude_key)
    return int(refunds.aggregate(total=Sum("amount_cents"))["total"] or 0)


def refund_call_order_number(arguments: dict[str, Any]) -> str:
    """The order a refund call names, as order numbers are compared (trimmed, in capitals)."""
    return str(arguments.get("order_number", "")).strip().upper()


def refund_calls_still_to_happen(*, customer_ids: Iterable[int]) -> QuerySet[ToolCall]:
    """Refund calls of these customers with no refund row yet whose refund may still happen: any call
    not final (recorded to run, waiting for a staff approval, or waiting for the customer's
    confirmation, approved or not) of a run that has not ended. Their orders are in their arguments
    (``refund_call_order_number``)."""
    return ToolCall.objects.filter(
        name="issue_refund",
        ticket__customer_id__in=list(customer_ids),
        refund__isnull=True,
        run__status__in=ACTIVE_RUN_STATUSES,
    ).exclude(status__in=FINAL_CALL_STATUSES)


def refund_asked_on(order: Order) -> bool:
    """Was a refund on this order paid, or asked for in any ticket of its customer (declined, stopped
    by a person)? Earlier requests are found by the order's number (asking again after a refusal is
    reviewed), so the admin keeps what the order was paid against as it was (``OrderAdmin.PAID_AGAINST``)."""
    if Refund.objects.filter(order=order).exists():
        return True
    number = order.number.strip().upper()
    asked = ToolCall.objects.filter(ticket__customer_id=order.customer_id, name="issue_refund").values_list(
        "arguments__order_number", flat=True
    )
    return any(str(n or "").strip().upper() == number for n in asked)
