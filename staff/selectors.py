"""Reads for the staff inbox: which tickets need whom, one ticket's conversation, orders and trace."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractBaseUser
from django.db.models import BooleanField, Exists, ExpressionWrapper, F, OuterRef, Q, QuerySet, Subquery
from django.db.models.fields.json import KT
from django.db.models.functions import Coalesce

from agents.models import AgentRun, ModelStep, Refund, ToolCall
from agents.selectors import failed_unseen, orders_with_refunded_total
from approvals.models import ApprovalRequest
from tickets.models import Order, Ticket, TicketEvent, TicketStatus
from tickets.selectors import assignable_staff

FINISHED = [TicketStatus.RESOLVED, TicketStatus.CLOSED]


@dataclass(frozen=True)
class View:
    slug: str
    title: str
    description: str


VIEWS = [
    View("needs_person", "Needs a person", "Handed off by the agent, parked after failures, or taken over."),
    View("mine", "Mine", "Assigned to you and not resolved."),
    View("approval", "Waiting for approval", "The agent paused for a staff decision."),
    View("open", "All open", "Every ticket that is not resolved or closed."),
    View("rated", "Rated", "Tickets the customer rated, the latest rating first."),
    View("all", "All tickets", "Every ticket, resolved and closed ones too: to find one by its number or customer."),
]
VIEW_SLUGS = {view.slug for view in VIEWS}
# The assignee filter's "Nobody": a value no username can be (Django's are letters, digits and @.+-_),
# so a colleague called "none" is listed as themselves.
NOBODY = "(nobody)"
# The views of tickets waiting for the team in one state: listed by how long they have waited in it
# (since the status change that put them there), not by their last change of any kind (a colleague's
# note, a reminder, the customer writing again would send the longest wait to the bottom).
QUEUES = {"needs_person", "approval"}


def _in_view(tickets: QuerySet[Ticket], slug: str, user: AbstractBaseUser) -> QuerySet[Ticket]:
    if slug == "needs_person":
        return tickets.filter(status=TicketStatus.WITH_HUMAN)
    if slug == "mine":
        return tickets.filter(assignee=user).exclude(status__in=FINISHED)
    if slug == "approval":
        return tickets.filter(status=TicketStatus.PENDING_APPROVAL)
    if slug == "rated":
        return tickets.filter(rating__isnull=False)
    if slug == "all":
        return tickets
    return tickets.exclude(status__in=FINISHED)


def assignee_choices() -> list[tuple[str, str]]:
    """Whom the inbox's assignee filter offers, (username, label), by username: everyone who can work
    tickets, and anyone else who still holds an unfinished ticket (someone who left the team, or lost the
    right): their tickets wait for nobody, and are found by their name."""
    workers = assignable_staff()
    holding = Ticket.objects.exclude(status__in=FINISHED).filter(assignee__isnull=False).values("assignee_id")
    left = get_user_model().objects.filter(pk__in=holding).exclude(pk__in=workers.values("pk"))
    choices = [(person.get_username(), person.get_username()) for person in workers]
    choices += [(person.get_username(), f"{person.get_username()} (cannot work tickets)") for person in left]
    return sorted(choices)


def view_counts(*, user: AbstractBaseUser) -> dict[str, int]:
    return {view.slug: _in_view(Ticket.objects.all(), view.slug, user).count() for view in VIEWS}


def inbox(
    *, user: AbstractBaseUser, view: str, status: str = "", assignee: str = "", query: str = ""
) -> QuerySet[Ticket]:
    """The tickets of one view, oldest first (in the QUEUES, the one that has waited longest in the
    view's state on top, by when it came into it; in the others by their last change; in "rated", the
    latest rating first; in "all", the latest change first), filtered, each with its last message and
    the customer's rating.

    ``assignee``: a username, or NOBODY for unassigned. ``query``: a ticket id (``42`` or
    ``#42``), an order number, or part of the customer's name or email, or of the subject."""
    tickets = _in_view(Ticket.objects.select_related("customer", "assignee"), view, user)
    if status in TicketStatus.values:
        tickets = tickets.filter(status=status)
    # "none": the Nobody of links made before NOBODY, unless someone is called that.
    legacy = assignee == "none" and not get_user_model().objects.filter(username=assignee).exists()
    if assignee == NOBODY or legacy:
        tickets = tickets.filter(assignee__isnull=True)
    elif assignee:
        tickets = tickets.filter(assignee__username=assignee)
    query = query.strip()
    if query:
        match = (
            Q(subject__icontains=query)
            | Q(customer__name__icontains=query)
            | Q(customer__email__icontains=query)
            | Q(Exists(Order.objects.filter(customer=OuterRef("customer"), number__iexact=query)))
        )
        digits = query.removeprefix("#")
        if digits.isascii() and digits.isdigit() and len(digits) < 18:
            match |= Q(pk=int(digits))
        tickets = tickets.filter(match)
    # The last message in the timeline's order, not by the clocks of the hosts that wrote them.
    last = TicketEvent.objects.filter(ticket=OuterRef("pk"), kind="message").order_by("-seq")
    tickets = tickets.annotate(
        last_message=Subquery(last.values(text=KT("payload__body"))[:1]),
        last_author=Subquery(last.values(author=KT("payload__author_kind"))[:1]),
        last_public=Subquery(last.values("is_public")[:1]),
        rating_score=F("rating__score"),
        rating_comment=F("rating__comment"),
    )
    # When the ticket came into its status (the last status change; never changed: since it opened).
    changed = TicketEvent.objects.filter(ticket=OuterRef("pk"), kind="status_changed").order_by("-seq")
    tickets = tickets.annotate(
        waiting_since=Coalesce(Subquery(changed.values("created_at")[:1]), F("created_at")),
        # The queue's order: which ticket came into its state first, by the change's place in the
        # order the database numbered all events (not its time, which the writing host's clock read:
        # a host ten minutes ahead would send the longest wait to the bottom).
        came_in=Subquery(changed.values("id")[:1]),
    )
    # What the view is ordered by, as ``sort_key`` (then the id): a page starts after the last row of the
    # page before it (``inbox_page``).
    key = {"rated": F("rating__updated_at"), "all": F("updated_at")}.get(view)
    if key is None:
        key = F("came_in") if view in QUEUES else F("updated_at")
    return tickets.annotate(sort_key=key).order_by(*_order(view))


# The views listed latest first ("rated": the latest rating; "all", looking one up: the latest change).
LATEST_FIRST = {"rated", "all"}


def _order(view: str, *, backwards: bool = False) -> list[Any]:
    descending = (view in LATEST_FIRST) != backwards
    if descending:
        return [F("sort_key").desc(nulls_last=True), "-id"]
    return [F("sort_key").asc(nulls_first=True), "id"]


# Where a page of the inbox starts: after (or before) the row with this sort key and ticket id.
Cursor = tuple[Any, int]


def cursor_of(ticket: Ticket) -> str:
    """The place of a listed ticket in its view, as a link carries it: its sort key and its id."""
    value = ticket.sort_key  # type: ignore[attr-defined]
    text = "" if value is None else value.isoformat() if hasattr(value, "isoformat") else str(value)
    return f"{text}~{ticket.pk}"


def cursor_read(view: str, text: str) -> Cursor | None:
    """The cursor a link carries (``cursor_of``); None when it is not one of this view's."""
    value, _, pk = text.rpartition("~")
    if not (pk.isascii() and pk.isdigit() and len(pk) < 19):
        return None
    if value == "":
        return (None, int(pk)) if view in QUEUES else None
    if view in QUEUES:
        return (int(value), int(pk)) if value.isascii() and value.isdigit() and len(value) < 19 else None
    try:
        moment = datetime.fromisoformat(value)
        moment = moment.astimezone(UTC) if moment.tzinfo is not None else None  # as the database reads it
    except (ValueError, OverflowError):  # not a time, or one past the calendar's ends in UTC
        return None
    return (moment, int(pk)) if moment is not None else None


def _beyond(view: str, cursor: Cursor, *, backwards: bool) -> Q:
    """The rows of the view after the cursor in its order (before it, ``backwards``)."""
    value, pk = cursor
    if value is None:  # only a queue's (nulls first): a ticket never changed status
        return (
            Q(sort_key__isnull=True, pk__lt=pk)
            if backwards
            else Q(sort_key__isnull=True, pk__gt=pk) | Q(sort_key__isnull=False)
        )
    later = "lt" if (view in LATEST_FIRST) != backwards else "gt"
    beyond = Q(**{f"sort_key__{later}": value}) | Q(sort_key=value, **{f"pk__{later}": pk})
    if backwards and view not in LATEST_FIRST:
        beyond |= Q(sort_key__isnull=True)
    return beyond


@dataclass
class InboxPage:
    tickets: list[Ticket]
    start: int  # the place of the first ticket in the view (from 1); 0 when the page is empty
    total: int
    previous: str  # the cursor before which the previous page ends ("" when there is none)
    next: str  # the cursor after which the next page starts ("" when there is none)

    @property
    def end(self) -> int:
        return self.start + len(self.tickets) - 1 if self.tickets else 0


def inbox_page(
    tickets: QuerySet[Ticket], *, view: str, size: int, after: Cursor | None = None, before: Cursor | None = None
) -> InboxPage:
    """One page of an ``inbox`` view: the ``size`` tickets after the cursor ``after`` (before ``before``;
    neither: the first page). A page starts where the page read before it ended, not at a count of rows:
    a ticket that left the view meanwhile, or moved to its end, does not move the next page's first
    ticket onto the page already read."""
    if before is not None:
        earlier_rows = tickets.filter(_beyond(view, before, backwards=True)).order_by(*_order(view, backwards=True))
        rows = list(earlier_rows[:size])[::-1]
        if len(rows) < size:  # the start of the view: its first page
            return inbox_page(tickets, view=view, size=size)
    else:
        rows = list((tickets.filter(_beyond(view, after, backwards=False)) if after is not None else tickets)[:size])
        if not rows and after is not None:  # the tickets after it left the view meanwhile: its last page
            rows = list(tickets.order_by(*_order(view, backwards=True))[:size])[::-1]
    total = tickets.count()
    if not rows:
        return InboxPage(tickets=[], start=0, total=total, previous="", next="")
    first, last = (rows[0].sort_key, rows[0].pk), (rows[-1].sort_key, rows[-1].pk)  # type: ignore[attr-defined]
    earlier = tickets.filter(_beyond(view, first, backwards=True)).count()
    later = tickets.filter(_beyond(view, last, backwards=False)).exists()
    return InboxPage(
        tickets=rows,
        start=earlier + 1,
        total=total,
        previous=cursor_of(rows[0]) if earlier else "",
        next=cursor_of(rows[-1]) if later else "",
    )


def orders_beside(*, ticket: Ticket) -> list[Order]:
    return list(orders_with_refunded_total(Order.objects.filter(customer_id=ticket.customer_id)).order_by("-placed_at"))


def refunds_of(*, ticket: Ticket) -> list[Refund]:
    """Every refund of the customer's orders (from any ticket), newest first; each with ``may_still_be_paid``:
    failed without the provider ever showing it, still asked about (``agents.selectors.failed_unseen``): a
    person reading a plain "failed" would refund by hand, and the request still on its way may land."""
    return list(
        Refund.objects.filter(order__customer_id=ticket.customer_id)
        .annotate(may_still_be_paid=ExpressionWrapper(failed_unseen(), output_field=BooleanField()))
        .select_related("order")
        .order_by("-created_at")
    )


@dataclass
class StepTrace:
    step: ModelStep
    calls: list[ToolCall]

    @property
    def duration_ms(self) -> float | None:
        if self.step.completed_at is None:
            return None
        return (self.step.completed_at - self.step.started_at).total_seconds() * 1000


@dataclass
class RunTrace:
    run: AgentRun
    steps: list[StepTrace]

    @property
    def duration_ms(self) -> float | None:
        if self.run.ended_at is None:
            return None
        return (self.run.ended_at - self.run.started_at).total_seconds() * 1000


def trace(*, ticket: Ticket) -> dict[str, Any]:
    """What the agent did on a ticket, run by run: steps, calls, approvals, refunds, recovery, tokens."""
    runs = list(AgentRun.objects.filter(ticket=ticket).order_by("started_at", "id"))
    steps = ModelStep.objects.filter(ticket=ticket).defer("request_messages").order_by("run_id", "index", "attempt")
    calls = ToolCall.objects.filter(ticket=ticket).order_by("step_id", "index")
    calls_by_step: dict[int, list[ToolCall]] = {}
    for call in calls:
        calls_by_step.setdefault(call.step_id, []).append(call)
    steps_by_run: dict[int, list[StepTrace]] = {}
    for step in steps:
        steps_by_run.setdefault(step.run_id, []).append(StepTrace(step, calls_by_step.get(step.pk, [])))
    return {
        "runs": [RunTrace(run, steps_by_run.get(run.pk, [])) for run in runs],
        "approvals": list(ApprovalRequest.objects.filter(ticket=ticket).select_related("decided_by")),
        "refunds": list(Refund.objects.filter(ticket=ticket).select_related("order").order_by("created_at")),
        "tokens": {
            "prompt": sum(r.prompt_tokens for r in runs),
            "completion": sum(r.completion_tokens for r in runs),
            "wasted": sum(r.wasted_tokens for r in runs),
        },
    }
