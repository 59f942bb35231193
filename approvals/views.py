"""The staff approval dashboard. Every endpoint requires the approval permission."""

from __future__ import annotations

from functools import wraps
from typing import Any
from urllib.parse import urlencode

from django.contrib import messages
from django.core.exceptions import PermissionDenied, ValidationError
from django.core.paginator import Paginator
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_POST

from approvals import selectors, services
from approvals.models import ApprovalRequest, ApprovalStatus
from support import fields
from support.clock import database_now
from tickets import pages


def approver_required(view: Any) -> Any:
    @wraps(view)
    def wrapped(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        if not request.user.is_authenticated:
            return pages.sign_in_again(request, reverse("approvals:dashboard"))
        if not services.can_decide(request.user):
            raise PermissionDenied("You do not have permission to decide approvals.")
        return view(request, *args, **kwargs)

    return wrapped


def _pending_context(request: HttpRequest, typed: dict[str, Any] | None = None) -> dict[str, Any]:
    """What the dashboard shows; ``typed``: the decision form sent and refused (its request, decision
    and note), whose note is shown again in that form of the card."""
    cards, more = selectors.pending_cards()
    return {
        "typed": typed or {},
        "cards": cards,
        # Their cards offer no buttons: the service refuses the decision anyway (OwnRequest).
        "own_tickets": selectors.own_tickets(user=request.user, ticket_ids={c.approval.ticket_id for c in cards}),
        "more": more,
        "past_expiry": selectors.approvals_past_expiry_ids(),
        "person_took": selectors.approvals_a_person_took_ids(),
        # The request's times are on the database's clock (approvals.services): how long it waited and
        # has left are told on it too, whatever this web server's own clock says.
        "now": database_now(),
        "note_max_chars": services.DECISION_NOTE_MAX_CHARS,
    }


@require_GET
@approver_required
def dashboard(request: HttpRequest) -> HttpResponse:
    return render(request, "approvals/dashboard.html", _pending_context(request))


@require_GET
@approver_required
def pending_fragment(request: HttpRequest) -> HttpResponse:
    return render(request, "approvals/_pending.html", _pending_context(request))


HISTORY_PAGE_SIZE = 100


@require_GET
@approver_required
def history(request: HttpRequest) -> HttpResponse:
    usernames = [user.get_username() for user in selectors.approval_deciders()]
    # Unknown values filter nothing rather than fail: the page is a bookmarkable list.
    decision = request.GET.get("decision", "")
    decision = decision if decision in selectors.DECIDED_STATUSES else ""
    decider = request.GET.get("decider", "")
    decider = decider if decider in usernames else ""
    ticket = request.GET.get("ticket", "").strip().removeprefix("#")
    ticket_id = int(ticket) if ticket.isascii() and ticket.isdigit() and len(ticket) < 19 else None
    decided = selectors.approvals_decided(decision=decision, decider=decider, ticket_id=ticket_id)
    page = Paginator(decided, HISTORY_PAGE_SIZE).get_page(request.GET.get("page"))
    kept = {k: v for k, v in (("decision", decision), ("decider", decider), ("ticket", ticket_id)) if v}
    context = {
        "rows": [
            {
                "approval": a,
                "label": selectors.tool_label(a.tool_name),
                "sentence": _sentence(a),
                "stopped": selectors.stopped_before_it_ran(a),
                "came_of_it": selectors.what_came_of_it(a),
            }
            for a in page.object_list
        ],
        "page": page,
        "newer": urlencode({**kept, "page": page.previous_page_number()}) if page.has_previous() else "",
        "older": urlencode({**kept, "page": page.next_page_number()}) if page.has_next() else "",
        "decisions": [(value, ApprovalStatus(value).label) for value in selectors.DECIDED_STATUSES],
        "deciders": usernames,
        "decision": decision,
        "decision_label": ApprovalStatus(decision).label if decision else "",
        "decider": decider,
        "ticket_id": ticket_id,
    }
    return render(request, "approvals/history.html", context)


def _sentence(approval: ApprovalRequest) -> str:
    return selectors.action_sentence(
        tool_name=approval.tool_name, arguments=approval.arguments, currency=approval.currency
    )


# What a card's forms send: Approve all of them, Reject its decision and note. A decision reads each once.
DECISION_FIELDS = ("decision", "note", "seen_seq", "provider_seen", "confirm_amount")


@require_POST
@approver_required
def decide(request: HttpRequest, approval_id: int) -> HttpResponse:
    approval = get_object_or_404(ApprovalRequest, pk=approval_id)
    if refused := _form_refused(request):
        # Read as it came, the last of two values counted (a Reject sent with an Approve approved) and a
        # field not read was dropped (an amount sent beside Approve: the whole amount was approved).
        messages.error(request, f"{refused} Nothing was changed.")
        return render(request, "approvals/dashboard.html", _pending_context(request), status=400)
    decision = request.POST.get("decision")
    if decision not in {"approve", "reject"}:
        messages.error(request, "Choose approve or reject. Nothing was changed.")
        return render(request, "approvals/dashboard.html", _pending_context(request), status=400)
    # Refused, the card comes back with the note as typed: sent again without typing it twice.
    typed = {"approval_id": approval.pk, "decision": decision, "note": request.POST.get("note", "")}
    approve = decision == "approve"
    # A request decided meanwhile is refused by the service, which says by whom.
    if approve and approval.status == ApprovalStatus.PENDING and not _amount_confirmed(request, approval):
        messages.error(
            request,
            f"Approving {approval.amount_display} needs a confirmation: tick "
            f"“{selectors.approval_confirmation_text(approval)}” and approve again. Nothing was changed.",
        )
        return render(request, "approvals/dashboard.html", _pending_context(request, typed), status=400)
    seen = _page_mark(request, approval)
    if seen is None:
        messages.error(
            request,
            f"The form's 'seen_seq' names no moment of ticket #{approval.ticket_id}: reload the dashboard and "
            "decide again. Nothing was changed.",
        )
        return render(request, "approvals/dashboard.html", _pending_context(request, typed), status=400)
    try:
        services.approval_decide(
            approval_id=approval.pk,
            user=request.user,
            approve=approve,
            note=request.POST.get("note", ""),
            seen_seq=seen,
            # A form that does not say what its card showed of the provider showed none of it read.
            provider_shown=request.POST.get("provider_seen", "unread"),
        )
    except ValidationError as exc:
        messages.error(request, " ".join(exc.messages))
        return _conflict(request, exc, typed)
    except services.OwnRequest as exc:
        messages.error(request, str(exc))
        return render(request, "approvals/dashboard.html", _pending_context(request, typed), status=403)
    verb = "Approved" if decision == "approve" else "Rejected"
    messages.success(request, f"{verb} request #{approval.pk} for ticket #{approval.ticket_id}.")
    return redirect("approvals:dashboard")


def _form_refused(request: HttpRequest) -> str:
    """Why the decision's form is refused as sent ("" if it is not): a field sent twice, or one a
    decision does not read."""
    twice = fields.form_twice(request)
    if twice:
        return f"{fields.twice_words(twice)}: a card sends each once."
    unread = fields.form_unread(request, DECISION_FIELDS)
    if unread:
        return (
            f"A decision does not read {fields.listed(unread)}: it approves or rejects the request as its card "
            "shows it."
        )
    return ""


def _page_mark(request: HttpRequest, approval: ApprovalRequest) -> int | None:
    """The ticket's timeline number the deciding card was read at (``seen_seq``), or None when the form
    names no moment of the ticket (not a whole number, or past its last event). A form that does not say
    is held to what the request showed when it was made: the customer's words and colleagues' notes
    written since then are read before an approval, as on a card read before them."""
    if "seen_seq" not in request.POST:
        return selectors.page_mark_of_a_request(approval)
    seen = pages.page_read(request, "seen_seq")
    if seen is None or seen > selectors.ticket_last_seq(approval.ticket_id):
        return None
    return seen


def _amount_confirmed(request: HttpRequest, approval: ApprovalRequest) -> bool:
    """Above the confirmation level the form must carry the amount it confirmed (the one on the card)."""
    if not selectors.approval_needs_confirmation(approval):
        return True
    return request.POST.get("confirm_amount") == str(approval.amount_cents)


def _conflict(request: HttpRequest, exc: ValidationError, typed: dict[str, Any]) -> HttpResponse:
    """Show the dashboard again with the reason, with a status that says nothing changed."""
    status = 409 if isinstance(exc, services.ApprovalClosed) else 400
    return render(request, "approvals/dashboard.html", _pending_context(request, typed), status=status)
