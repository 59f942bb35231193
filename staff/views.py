"""The staff inbox: the tickets that need a person, one ticket's conversation, and what a person
does on it. Every page and action asks for ``tickets.handle_ticket`` (the "Support staff" group):
anonymous users go to the login page, signed-in users without it get 403.

Thin: parse, call one service in ``tickets.services``, redirect (or render the form again with
what was typed and the reason, status 400/409, when a service refuses).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from functools import wraps
from typing import Any
from urllib.parse import urlencode

from django.contrib import messages
from django.contrib.auth import get_user_model
from django.core.exceptions import PermissionDenied, ValidationError
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.template.loader import render_to_string
from django.urls import reverse
from django.views.decorators.http import require_GET, require_POST

from staff import presenters, selectors
from support import reads
from support.clock import database_now
from tickets import pages, services
from tickets import selectors as ticket_selectors
from tickets.models import BIGINT_MAX, HANDLE_PERMISSION, TICKET_TRANSITIONS, Ticket, TicketEvent, TicketStatus


def staff_required(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
    @wraps(view)
    def wrapped(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        if not request.user.is_authenticated:
            ticket_id = kwargs.get("ticket_id")
            page = reverse("staff:ticket", args=[ticket_id]) if ticket_id is not None else reverse("staff:inbox")
            return pages.sign_in_again(request, page)
        if not (request.user.is_active and request.user.has_perm(HANDLE_PERMISSION)):
            raise PermissionDenied("This page is for the support team.")
        return view(request, *args, **kwargs)

    return wrapped


# Tickets on one page of the inbox; the pages after it link on, with the view, search and filters.
INBOX_PAGE_SIZE = 100


@require_GET
@staff_required
def inbox(request: HttpRequest) -> HttpResponse:
    view = request.GET.get("view", "needs_person")
    if view not in selectors.VIEW_SLUGS:
        view = "needs_person"
    status = request.GET.get("status", "")
    assignee = request.GET.get("assignee", "")
    query = request.GET.get("q", "")[:200]
    tickets = selectors.inbox(user=request.user, view=view, status=status, assignee=assignee, query=query)
    # A page starts after the last ticket of the page read before it (before the first, going back): not
    # at a count of rows, which colleagues change as they work the view.
    after = selectors.cursor_read(view, request.GET.get("after", ""))
    before = None if after is not None else selectors.cursor_read(view, request.GET.get("before", ""))
    page = selectors.inbox_page(tickets, view=view, size=INBOX_PAGE_SIZE, after=after, before=before)
    kept = {k: v for k, v in (("view", view), ("q", query), ("status", status), ("assignee", assignee)) if v}
    context = {
        "views": selectors.VIEWS,
        "view": view,
        "queue": view in selectors.QUEUES,
        "counts": selectors.view_counts(user=request.user),
        "tickets": page.tickets,
        "page": page,
        "previous": urlencode({**kept, "before": page.previous}) if page.previous else "",
        "next": urlencode({**kept, "after": page.next}) if page.next else "",
        "status": status,
        "assignee": assignee,
        "nobody": selectors.NOBODY,
        "query": query,
        "statuses": TicketStatus.choices,
        "assignees": selectors.assignee_choices(),
        # "… ago" is measured on the clock the tickets' times were written on, not this host's.
        "now": database_now(),
    }
    return render(request, "staff/inbox.html", context)


def _timeline(ticket: Ticket, after: int = 0) -> tuple[list[dict[str, Any]], int]:
    events = TicketEvent.objects.filter(ticket=ticket, seq__gt=after).select_related("actor_user").order_by("seq")
    return presenters.present_all(events, ticket=ticket)


def _ticket_page(
    request: HttpRequest, ticket_id: int, *, reply: str = "", note: str = "", status: int = 200
) -> HttpResponse:
    """The ticket's page, every part read from one snapshot: its status and holder (which its forms
    send back) are those of the timeline it shows, whatever a colleague or the agent commits meanwhile."""
    with reads.one_snapshot():
        return _ticket_page_read(request, _ticket_or_404(ticket_id), reply=reply, note=note, status=status)


def _ticket_page_read(request: HttpRequest, ticket: Ticket, *, reply: str, note: str, status: int) -> HttpResponse:
    items, last_seq = _timeline(ticket)
    staff_people = ticket_selectors.assignable_staff()
    # Held by someone who can no longer work tickets (who left the team): the box says so, not "Nobody".
    held_by_one_who_left = ticket.assignee_id and not staff_people.filter(pk=ticket.assignee_id).exists()
    assignee_left = ticket.assignee if held_by_one_who_left else None
    context = {
        "ticket": ticket,
        "items": items,
        "last_seq": last_seq,
        "reply_text": reply,
        "note_text": note,
        "max_chars": services.MESSAGE_MAX_CHARS,
        # Per render: a double-clicked (or retried) send carries the same id and posts once.
        "reply_id": uuid.uuid4().hex,
        # Who has the ticket as this page shows it: a reply sent after a colleague took it is refused.
        "holder": pages.holder_shown(ticket),
        "note_id": uuid.uuid4().hex,
        "orders": selectors.orders_beside(ticket=ticket),
        "refunds": selectors.refunds_of(ticket=ticket),
        "rating": ticket_selectors.ticket_rating(ticket=ticket),
        "trace": selectors.trace(ticket=ticket),
        "staff_people": staff_people,
        "assignee_left": assignee_left,
        "allowed": _allowed_actions(ticket),
        "counts": selectors.view_counts(user=request.user),
        "views": selectors.VIEWS,
    }
    return render(request, "staff/ticket.html", context, status=status)


def _allowed_actions(ticket: Ticket) -> dict[str, bool]:
    status = ticket.status
    return {
        "take_over": status != TicketStatus.CLOSED and status != TicketStatus.WITH_HUMAN,
        "hand_back": status == TicketStatus.WITH_HUMAN,
        "resolve": TicketStatus.RESOLVED in TICKET_TRANSITIONS[status],
        "close": TicketStatus.CLOSED in TICKET_TRANSITIONS[status],
        "write": status != TicketStatus.CLOSED,
        # A closed ticket is final: nobody is given it (``services.ticket_assign_to`` refuses).
        "assign": status != TicketStatus.CLOSED,
    }


def _ticket_or_404(ticket_id: int) -> Ticket:
    return get_object_or_404(Ticket.objects.select_related("customer", "assignee"), pk=ticket_id)


@require_GET
@staff_required
def ticket(request: HttpRequest, ticket_id: int) -> HttpResponse:
    return _ticket_page(request, ticket_id)


@require_GET
@staff_required
def timeline_after(request: HttpRequest, ticket_id: int) -> JsonResponse:
    """What is new on the timeline after ``?after=<seq>``, rendered, with the ticket's status now: read
    from one snapshot, so that the status and holder are those of the timeline's last event sent."""
    try:
        after = min(max(0, int(request.GET.get("after", "0"))), BIGINT_MAX)
    except ValueError:
        return JsonResponse({"error": "after must be a whole number."}, status=400)
    with reads.one_snapshot():
        return _timeline_after_read(request, _ticket_or_404(ticket_id), after)


def _timeline_after_read(request: HttpRequest, found: Ticket, after: int) -> JsonResponse:
    items, last_seq = _timeline(found, after)
    html = render_to_string("staff/_timeline_items.html", {"items": items}, request=request)
    side = {
        "ticket": found,
        "orders": selectors.orders_beside(ticket=found),
        "refunds": selectors.refunds_of(ticket=found),
        "rating": ticket_selectors.ticket_rating(ticket=found),
    }
    return JsonResponse(
        {
            "html": html,
            # The customer's orders and refunds, as they are now (a refund may just have been issued).
            "side_html": render_to_string("staff/_side.html", side, request=request),
            "last_seq": max(after, last_seq),
            "status": found.status,
            "status_text": found.get_status_display(),
            "assignee": found.assignee.get_username() if found.assignee else "",
            # The same two the page's forms send back (``holder``, ``assigned``), read with the status
            # and assignee shown above: an action is judged against what the page showed, live too.
            "holder": pages.holder_shown(found),
            "assigned": found.assignee_id if found.assignee_id is not None else "",
            "allowed": _allowed_actions(found),
        }
    )


def _back(ticket_id: int) -> HttpResponse:
    return redirect(reverse("staff:ticket", kwargs={"ticket_id": ticket_id}) + "#composer")


def _refused(request: HttpRequest, ticket_id: int, exc: ValidationError, **typed: str) -> HttpResponse:
    messages.error(request, " ".join(exc.messages))
    code = getattr(exc, "code", "")
    status = 409 if code in {"invalid_transition", "closed", "not_with_person", "client_msg_id_conflict"} else 400
    return _ticket_page(request, ticket_id, status=status, **typed)


def _write(is_public: bool) -> Callable[..., HttpResponse]:
    post = services.staff_reply if is_public else services.staff_note
    field = "reply" if is_public else "note"

    @require_POST
    @staff_required
    def view(request: HttpRequest, ticket_id: int) -> HttpResponse:
        found = _ticket_or_404(ticket_id)
        body = request.POST.get("body", "")
        extra = pages.as_read(request, ["holder", "seen"] if is_public else [])
        try:
            _, created = post(
                ticket=found, user=request.user, body=body, client_msg_id=request.POST.get("client_msg_id", ""), **extra
            )
        except ValidationError as exc:
            return _refused(request, ticket_id, exc, **{field: body})
        if created:
            messages.success(request, "Reply sent to the customer." if is_public else "Internal note added.")
        seen = extra.get("seen_seq")
        if created and seen is not None and services.customer_wrote_since(ticket=found, seq=seen):
            messages.warning(request, "The customer wrote again while you were replying: their new message waits.")
        return _back(ticket_id)

    view.__name__ = field
    return view


reply = _write(is_public=True)
note = _write(is_public=False)


def _action(service: Callable[..., Ticket], done: str, *, reads: tuple[str, ...] = ()) -> Callable[..., HttpResponse]:
    @require_POST
    @staff_required
    def view(request: HttpRequest, ticket_id: int) -> HttpResponse:
        found = _ticket_or_404(ticket_id)
        try:
            ticket = service(ticket=found, user=request.user, **pages.as_read(request, reads))
        except ValidationError as exc:
            return _refused(request, ticket_id, exc)
        unchanged = services.nothing_changed(ticket)
        if unchanged:
            messages.info(request, unchanged)
        else:
            messages.success(request, done)
        return _back(ticket_id)

    view.__name__ = service.__name__
    return view


# From a page read before someone resolved or assigned the ticket, a take-over would reopen it or take
# it from its assignee: refused.
take_over = _action(
    services.ticket_take_over, "You have the ticket: the agent stays out until you hand it back.", reads=("seen",)
)
# Handing back from a page read before a colleague took the ticket would undo their take-over, and
# from one read before the agent handed it to a person, that hand-off (the agent does not repeat it):
# refused.
hand_back = _action(
    services.ticket_hand_back, "Handed back: the agent answers what comes next.", reads=("holder", "seen")
)
# Resolve and close leave the customer's next words to nobody, and end a colleague's conversation:
# refused from a page that did not show the customer's message or the colleague's take-over.
resolve = _action(services.ticket_resolve, "Marked resolved.", reads=("holder", "seen"))
close = _action(services.ticket_close, "Closed.", reads=("holder", "seen"))


@require_POST
@staff_required
def assign(request: HttpRequest, ticket_id: int) -> HttpResponse:
    found = _ticket_or_404(ticket_id)
    username = request.POST.get("assignee", "")
    assignee = None
    if username:
        # A username first: the page names everyone by theirs, "Me" too, so a colleague called "me" is them.
        assignee = ticket_selectors.assignable_staff().filter(username=username).first()
        if assignee is None and username == "me":  # the "Me" of a page from before it sent the username
            assignee = request.user
        if assignee is None:
            exists = get_user_model().objects.filter(username=username).exists()
            reason = "cannot work tickets" if exists else "is not a user"
            return _refused(request, ticket_id, ValidationError(f"{username!r} {reason}.", code="bad_assignee"))
    # Whom the page showed assigned ("" nobody); a form without it (an older page) is not checked.
    shown = {"assignee_seen": pages.page_read(request, "assigned")} if "assigned" in request.POST else {}
    try:
        services.ticket_assign_to(
            ticket=found, assignee=assignee, user=request.user, holder_seen=pages.page_read(request, "holder"), **shown
        )
    except ValidationError as exc:
        return _refused(request, ticket_id, exc)
    messages.success(request, f"Assigned to {assignee.get_username()}." if assignee else "Unassigned.")
    return _back(ticket_id)
