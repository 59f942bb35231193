from __future__ import annotations

from typing import Any

from django.db.models import QuerySet

from approvals.models import ApprovalRequest, ApprovalStatus
from tickets import selectors as ticket_selectors
from tickets.models import Message
from tickets.presenters import attachment_item


def approvals_pending() -> QuerySet[ApprovalRequest]:
    """Oldest first: the customer who has waited longest is served first."""
    return (
        ApprovalRequest.objects.filter(status=ApprovalStatus.PENDING)
        .select_related("ticket", "ticket__customer")
        .order_by("requested_at", "id")
    )


def approvals_decided(*, limit: int = 100) -> QuerySet[ApprovalRequest]:
    return (
        ApprovalRequest.objects.exclude(status=ApprovalStatus.PENDING)
        .select_related("ticket", "ticket__customer", "decided_by")
        .order_by("-decided_at", "-id")[:limit]
    )


def approval_conversation(*, approval: ApprovalRequest, limit: int = 12) -> list[Message]:
    messages = Message.objects.filter(ticket_id=approval.ticket_id, is_public=True).order_by("-created_at", "-id")
    return list(reversed(messages[:limit]))


def approval_attachments(*, approval: ApprovalRequest) -> list[dict[str, Any]]:
    """The files the customer sent on the ticket (a photo of the damage, a receipt), for the card."""
    return [attachment_item(a) for a in ticket_selectors.ticket_attachments(ticket_id=approval.ticket_id)]
