"""What a staff page showed when it was read, as its forms send it back in hidden fields.

``holder``: who had the ticket (a user id; empty: the agent or nobody). ``seen``: the last
timeline event the page showed. The services take them as ``holder_seen`` and ``seen_seq`` and
refuse (or narrow) what was asked from a page that is no longer true: a colleague took the
ticket since, or the customer wrote since. The inbox and the admin send the same fields.

The admin's ticket list shows many tickets: each row sends ``seen-<ticket id>`` (the last event
the row showed), and the list ``listed`` (the last event of any ticket when it was read), for a
ticket selected beyond the page ("select all").
"""

from __future__ import annotations

from collections.abc import Iterable

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.views import redirect_to_login
from django.http import HttpRequest, HttpResponse, QueryDict
from django.shortcuts import resolve_url
from django.urls import reverse

from tickets import selectors
from tickets.models import Ticket, TicketStatus

# A hidden field of the page -> the service argument it becomes.
PAGE_FIELDS = {"holder": "holder_seen", "seen": "seen_seq"}


def page_read(request: HttpRequest, field: str) -> int | None:
    """One hidden field as posted; None when the page sent none (or not a number)."""
    value = request.POST.get(field, "")
    return int(value) if value.isascii() and value.isdigit() and len(value) < 19 else None


def as_read(request: HttpRequest, fields: Iterable[str]) -> dict[str, int | None]:
    """The service arguments of these hidden fields, as the page sent them."""
    return {PAGE_FIELDS[field]: page_read(request, field) for field in fields}


def seen_on_the_list(request: HttpRequest, ticket: Ticket) -> int | None:
    """The last timeline event of ``ticket`` the admin's list showed (its ``seen_seq``): its row's;
    for a ticket selected beyond the page, its last event when the list was read; None when the
    request says neither (a request not sent from the list)."""
    seen = page_read(request, f"seen-{ticket.pk}")
    if seen is not None:
        return seen
    listed = page_read(request, "listed")
    return None if listed is None else selectors.ticket_seq_as_of(ticket=ticket, event_id=listed)


def list_read_at() -> int:
    """What the admin's list sends as ``listed``: the last timeline event of any ticket now."""
    return selectors.last_event_id()


def holder_shown(ticket: Ticket) -> int | str:
    """The ``holder`` a page shows: the person who has the ticket, or empty (the agent or nobody)."""
    return ticket.assignee_id if ticket.status == TicketStatus.WITH_HUMAN and ticket.assignee_id else ""


def sign_in_again(request: HttpRequest, page: str) -> HttpResponse:
    """To the login page, and back after it: to the page asked for, or, for a form sent from a page
    whose session had ended (a POST-only action: a reply, a decision), to ``page``. The action's own
    URL answers only POST: signing in led to a bare 405. What was sent is not done, and it says so."""
    if request.method in ("GET", "HEAD"):
        return redirect_to_login(request.get_full_path())
    messages.warning(request, "You were signed out, so what you sent was not done. Sign in, then do it again.")
    return redirect_to_login(page)


def login_url_back_to(ticket_id: int) -> str:
    """The sign-in page, coming back to the customer's chat of this ticket afterwards (as
    login_required would send it)."""
    query = QueryDict(mutable=True)
    query["next"] = reverse("tickets:chat", args=[ticket_id])
    return resolve_url(settings.LOGIN_URL) + "?" + query.urlencode(safe="/")
