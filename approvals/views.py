"""The staff approval dashboard. Every endpoint requires the approval permission."""

from __future__ import annotations

from functools import wraps
from typing import Any

from django.contrib import messages
from django.contrib.auth.views import redirect_to_login
from django.core.exceptions import PermissionDenied, ValidationError
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.utils import timezone
from django.views.decorators.http import require_GET, require_POST

from approvals import selectors, services
from approvals.models import ApprovalRequest


def approver_required(view: Any) -> Any:
    @wraps(view)
    def wrapped(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        if not request.user.is_authenticated:
            return redirect_to_login(request.get_full_path())
        if not services.can_decide(request.user):
            raise PermissionDenied("You do not have permission to decide approvals.")
        return view(request, *args, **kwargs)

    return wrapped


def _pending_context() -> dict[str, Any]:
    now = timezone.now()
    rows = []
    for approval in selectors.approvals_pending():
        rows.append(
            {
                "approval": approval,
                "waiting": now - approval.requested_at,
                "conversation": selectors.approval_conversation(approval=approval),
                "attachments": selectors.approval_attachments(approval=approval),
            }
        )
    return {"rows": rows, "now": now}


@require_GET
@approver_required
def dashboard(request: HttpRequest) -> HttpResponse:
    return render(request, "approvals/dashboard.html", _pending_context())


@require_GET
@approver_required
def pending_fragment(request: HttpRequest) -> HttpResponse:
    return render(request, "approvals/_pending.html", _pending_context())


@require_GET
@approver_required
def history(request: HttpRequest) -> HttpResponse:
    return render(request, "approvals/history.html", {"approvals": selectors.approvals_decided()})


@require_POST
@approver_required
def decide(request: HttpRequest, approval_id: int) -> HttpResponse:
    approval = get_object_or_404(ApprovalRequest, pk=approval_id)
    decision = request.POST.get("decision")
    if decision not in {"approve", "reject"}:
        messages.error(request, "Choose approve or reject.")
        return redirect("approvals:dashboard")
    try:
        services.approval_decide(
            approval_id=approval.pk, user=request.user, approve=decision == "approve", note=request.POST.get("note", "")
        )
    except ValidationError as exc:
        messages.error(request, " ".join(exc.messages))
        return _conflict(request, exc)
    verb = "Approved" if decision == "approve" else "Rejected"
    messages.success(request, f"{verb} request #{approval.pk} for ticket #{approval.ticket_id}.")
    return redirect("approvals:dashboard")


def _conflict(request: HttpRequest, exc: ValidationError) -> HttpResponse:
    """Show the dashboard again with the reason, with a status that says nothing changed."""
    status = 409 if getattr(exc, "code", "") in {"already_decided", "expired"} else 400
    return render(request, "approvals/dashboard.html", _pending_context(), status=status)
