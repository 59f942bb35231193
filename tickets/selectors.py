"""Reads of the ledger that check access. The one door a customer has to a ticket."""

from __future__ import annotations

import copy
from collections.abc import Iterable
from datetime import datetime
from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.db.models import Exists, F, JSONField, Max, OuterRef, Q, QuerySet, Subquery
from django.db.models.functions import Coalesce
from django.http import Http404

from support import reads, rows
from tickets.models import (
    HANDLE_PERMISSION,
    ActorKind,
    Attachment,
    AuthorKind,
    Customer,
    Message,
    OrderLine,
    Ticket,
    TicketEvent,
    TicketRating,
    can_work_tickets,
)


def unanswered_messages(*, ticket_id: int | None = None) -> QuerySet[Message]:
    """Customer messages the agent has not taken into a turn yet: the one definition."""
    messages = Message.objects.filter(author_kind=AuthorKind.CUSTOMER, agent_handled_at__isnull=True)
    return messages if ticket_id is None else messages.filter(ticket_id=ticket_id)


_unanswered = reads.Kept(lambda ticket_id: unanswered_messages(ticket_id=ticket_id).order_by().values("pk"))


def unanswered_question(*, ticket_id: int) -> tuple[str, list[object]]:
    """ "Is a customer message waiting unanswered?" as SQL (one boolean) and its parameters, for a
    statement that asks it beside something else."""
    sql, params = _unanswered.sql(ticket_id)
    return f"EXISTS ({sql})", params


def has_unanswered_messages(*, ticket_id: int) -> bool:
    """Is there a customer message on the ticket that no turn has taken in? (Asked on every turn.)"""
    return _unanswered.exists(ticket_id)


def person_answered_after_sql(ticket: str = "%s", seq: str = "%s") -> str:
    """SQL of one boolean: has a person written to the customer on the ticket ``ticket`` (an SQL
    expression) after its timeline's number ``seq`` (one too)? Their reply's ``message`` event."""
    return (
        f"EXISTS (SELECT 1 FROM tickets_ticketevent e WHERE e.ticket_id = {ticket} AND e.seq > {seq} "
        "AND e.kind = 'message' AND e.actor_kind = 'staff' AND e.is_public)"
    )


def person_answered_after(*, ticket_id: int, seq: int) -> bool:
    """Has a person written to the customer on this ticket after its timeline's number ``seq``?
    Judged by the timeline's numbers, not by clocks: a reply whose transaction was still open when
    ``seq`` was read (its row stamped earlier) is numbered after it, and a host's clock does not
    matter."""
    return bool(reads.fetch(f"SELECT {person_answered_after_sql()}", [ticket_id, seq])[0][0])


def ticket_locked_for_reply(
    *, ticket_id: int, since: datetime, after_seq: int | None = None
) -> tuple[str, bool, bool, int, int]:
    """Lock the ticket's row for the agent's reply: (its status, whether a customer message waits
    unanswered, whether a person answered the customer after ``after_seq`` on the timeline, or
    where that is not known after ``since``, a key for the reply's message from its sequence, the
    last number of its timeline). Sent with the rows the transaction holds (they write neither
    table)."""
    unanswered, params = _unanswered.sql(ticket_id)
    if after_seq is not None:
        answered, answered_params = person_answered_after_sql(), [ticket_id, after_seq]
    else:
        answered = (
            "EXISTS (SELECT 1 FROM tickets_message m WHERE m.ticket_id = %s AND m.author_kind = %s "
            "AND m.is_public AND m.created_at > %s)"
        )
        answered_params = [ticket_id, AuthorKind.STAFF, since]
    found = rows.fetch_beside_held(
        f"SELECT status, EXISTS ({unanswered}), {answered}, "
        "nextval(pg_get_serial_sequence('tickets_message', 'id')), last_event_seq "
        "FROM tickets_ticket WHERE id = %s FOR UPDATE",
        [*params, *answered_params, ticket_id],
        tables=("tickets_ticket", "tickets_message", "tickets_ticketevent"),
    )
    if not found:
        raise Ticket.DoesNotExist(f"ticket {ticket_id} does not exist")
    status, waiting, person_answered, key, last_seq = found[0]
    return status, bool(waiting), bool(person_answered), key, last_seq


def ticket_with_customer_sql(ticket_id: int) -> tuple[str, Any]:
    """The query of ``ticket_with_customer``, to send along with others (``ticket_with_customer_from``)."""
    return reads.select_with_sql(Ticket, "customer", f"{Ticket._meta.db_table}.id = %s", [ticket_id])


def ticket_with_customer_from(found: Any) -> Ticket | None:
    tickets = reads.with_related(Ticket, "customer", found)
    return tickets[0] if tickets else None


def ticket_with_customer(*, ticket_id: int) -> Ticket | None:
    """The ticket with its customer, in one round trip (the agent's loop reads it every pass)."""
    return ticket_with_customer_from(reads.fetch(*ticket_with_customer_sql(ticket_id)))


def customer_for_user(*, user: AbstractBaseUser | AnonymousUser) -> Customer | None:
    if not user.is_authenticated:
        return None
    customer = Customer.objects.filter(user=user).first()
    if customer is not None:
        # Its user is the one asked about: ``customer.user`` (the author of what it opens) is not read again.
        customer.user = user
    return customer


def customers_of_person(*, user: AbstractBaseUser) -> QuerySet[Customer]:
    """The customer profiles that are this member of staff: their login's, and any under their email
    address (the same person shopping under a second login). The review the approval policy asks for
    of their refunds is a colleague's: they neither decide it nor take it away."""
    mine = Q(user_id=user.pk)
    email = (getattr(user, "email", "") or "").strip()
    if email:
        mine |= Q(email__iexact=email)
    return Customer.objects.filter(mine)


def customers_untied_by_email(*, user: AbstractBaseUser, email: str) -> QuerySet[Customer]:
    """The customer profiles that are this person's now (``customers_of_person``) and would no longer
    be if their email address were ``email``: a change that would let them decide their own refunds."""
    after = copy.copy(user)
    after.email = email
    return customers_of_person(user=user).exclude(pk__in=customers_of_person(user=after).values("pk"))


def tickets_for_customer(*, user: AbstractBaseUser | AnonymousUser) -> QuerySet[Ticket]:
    """The customer's tickets, newest activity first, each with (in the same query):

    - ``last_message``: the payload of its last public message event (author and text as the
      chat shows them), or None;
    - ``unread``: whether someone other than the customer wrote publicly after the last event the
      customer saw (``Ticket.customer_seen_seq``);
    - ``changed_at``: when the last event the customer can see happened (the ticket's ``updated_at``
      also moves with an internal note, an assignment, a reminder: what staff do out of the
      customer's sight neither says "updated just now" nor moves the ticket up their list).
    """
    customer = customer_for_user(user=user)
    if customer is None:
        return Ticket.objects.none()
    public_events = TicketEvent.objects.filter(ticket=OuterRef("pk"), is_public=True).order_by("-seq")
    public_messages = public_events.filter(kind="message")
    return (
        Ticket.objects.filter(customer=customer)
        .annotate(
            last_message=Subquery(public_messages.values("payload")[:1], output_field=JSONField()),
            unread=Exists(
                public_messages.filter(seq__gt=OuterRef("customer_seen_seq")).exclude(actor_kind=ActorKind.CUSTOMER)
            ),
            changed_at=Coalesce(Subquery(public_events.values("created_at")[:1]), F("created_at")),
            # Newest first by the order the database numbered the events in, not by hosts' clocks.
            changed_in=Subquery(public_events.values("id")[:1]),
        )
        .order_by(F("changed_in").desc(nulls_last=True), "-id")
    )


def ticket_get_for_customer(*, user: AbstractBaseUser | AnonymousUser, ticket_id: int) -> Ticket:
    """The ticket, if ``user`` is the customer who owns it; Http404 otherwise.

    Another customer's ticket and a missing ticket look the same, so ticket IDs
    cannot be probed.
    """
    if not user.is_authenticated:
        raise Http404("No such ticket")
    # One query: the ticket, through its customer's user (a user who is no customer finds none).
    ticket = _owned(user, ticket_id).select_related("customer").first()
    if ticket is None:
        raise Http404("No such ticket")
    return ticket


def _owned(user: AbstractBaseUser, ticket_id: int) -> QuerySet[Ticket]:
    return Ticket.objects.filter(pk=ticket_id, customer__user=user)


def ticket_owned_by(*, user: AbstractBaseUser, ticket_id: int) -> bool:
    """Is the ticket still ``user``'s? Asked again by a socket opened through ``ticket_get_for_customer``:
    the customer's profile may have been moved to another login since."""
    return _owned(user, ticket_id).exists()


def ticket_timeline(*, ticket: Ticket, after_seq: int = 0, public_only: bool = False) -> QuerySet[TicketEvent]:
    events = TicketEvent.objects.filter(ticket=ticket, seq__gt=after_seq).order_by("seq")
    if public_only:
        events = events.filter(is_public=True)
    return events


def public_messages(*, ticket: Ticket) -> QuerySet[Message]:
    return Message.objects.filter(ticket=ticket, is_public=True).order_by("created_at", "id")


def ticket_for_client_ref(*, customer: Customer, client_ref: str) -> Ticket | None:
    """The ticket a retried "open ticket" submit already opened, if any."""
    return Ticket.objects.filter(customer=customer, client_ref=client_ref).first()


_order_lines = reads.Kept(
    lambda order_id: OrderLine.objects.filter(order_id=order_id).values_list(
        "description", "quantity", "unit_price_cents"
    )
)


def order_lines_sql(order_id: int) -> tuple[str, list[Any]]:
    """The order's lines as (description, quantity, unit price in cents), as a query to send along
    with other reads (``support.reads.fetch_together``)."""
    return _order_lines.sql(order_id)


def ticket_rating(*, ticket: Ticket) -> TicketRating | None:
    return TicketRating.objects.filter(ticket=ticket).first()


# Staff who may open any ticket's files: the inbox (tickets.handle_ticket) and approvers, who see
# the files on the approval card (approvals.decide_approval, named here as a string: tickets
# does not import approvals).
STAFF_FILE_PERMISSIONS = (HANDLE_PERMISSION, "approvals.decide_approval")


def attachment_get_for_user(*, user: AbstractBaseUser | AnonymousUser, attachment_id: int) -> Attachment:
    """The attachment, if ``user`` may open it: support staff and approvers any, a customer those
    of their own tickets' public messages; Http404 otherwise (a file of someone else's ticket and
    a missing file look the same)."""
    if not user.is_authenticated:
        raise Http404("No such file")
    attachment = Attachment.objects.select_related("message__ticket__customer").filter(pk=attachment_id).first()
    if attachment is None:
        raise Http404("No such file")
    if any(user.has_perm(permission) for permission in STAFF_FILE_PERMISSIONS):
        return attachment
    if not attachment.message.is_public:
        raise Http404("No such file")
    if attachment.message.ticket.customer.user_id != user.pk:
        raise Http404("No such file")
    return attachment


def tickets_attachments(*, ticket_ids: Iterable[int]) -> QuerySet[Attachment]:
    """Every file sent on these tickets, each ticket's oldest first, with its message (for staff
    pages: no access check here)."""
    files = Attachment.objects.filter(message__ticket_id__in=list(ticket_ids)).select_related("message")
    return files.order_by("message__ticket_id", "message__created_at", "message_id", "position")


def stream_posted(*, ticket: Ticket, stream: int) -> bool:
    """Has a message replaced the answer streamed under ``stream`` (its event names the stream)?"""
    return TicketEvent.objects.filter(ticket=ticket, kind="message", payload__stream=stream).exists()


def assignable_staff() -> QuerySet[AbstractBaseUser]:
    """People who can work tickets: the support staff group, direct grants, superusers."""
    return get_user_model().objects.filter(can_work_tickets()).order_by("username")


def last_event_id() -> int:
    """The id of the newest timeline event of any ticket (0: none yet)."""
    return TicketEvent.objects.aggregate(last=Max("pk"))["last"] or 0


def ticket_seq_as_of(*, ticket: Ticket | int, event_id: int) -> int:
    """The last event of ``ticket`` among the timeline events up to id ``event_id`` (0: none): what a
    page read when ``event_id`` was the newest event showed of the ticket, had it shown it."""
    found = TicketEvent.objects.filter(ticket=ticket, pk__lte=event_id).aggregate(last=Max("seq"))["last"]
    return found or 0
