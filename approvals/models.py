"""Approval policy and requests: sensitive agent actions wait here for a staff decision."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.utils import timezone

from agents.models import ApprovalPolicy, ToolApprovalRule, ToolCall  # noqa: F401 (the policy lives with the agent)
from tickets.models import Ticket
from tickets.money import format_money


class ApprovalStatus(models.TextChoices):
    PENDING = "pending", "Pending"
    APPROVED = "approved", "Approved"
    REJECTED = "rejected", "Rejected"
    EXPIRED = "expired", "Expired"
    # The agent's run ended before anyone decided (a person took the ticket over, resolved or closed it).
    WITHDRAWN = "withdrawn", "Withdrawn"


class ApprovalRequest(models.Model):
    ticket = models.ForeignKey(Ticket, on_delete=models.CASCADE, related_name="approval_requests")
    # One call may be asked about again (its arguments changed after an approval): each request stays, with
    # its decision; at most one waits at a time (the constraint below).
    tool_call = models.ForeignKey(ToolCall, on_delete=models.CASCADE, related_name="approval_requests")
    tool_name = models.CharField(max_length=100)
    # The exact arguments approved; changed arguments need a new approval.
    arguments = models.JSONField()
    arguments_digest = models.CharField(max_length=64)
    reason = models.TextField(help_text="Why the policy asks for an approval")
    agent_reasoning = models.TextField(blank=True)
    evidence = models.JSONField(default=dict, blank=True)
    amount_cents = models.PositiveBigIntegerField(null=True, blank=True)
    currency = models.CharField(max_length=3, blank=True)
    status = models.CharField(max_length=10, choices=ApprovalStatus.choices, default=ApprovalStatus.PENDING)
    requested_at = models.DateTimeField(default=timezone.now)
    expires_at = models.DateTimeField()
    reminder_sent_at = models.DateTimeField(null=True, blank=True)
    decided_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.PROTECT)
    decided_at = models.DateTimeField(null=True, blank=True)
    note = models.TextField(blank=True)

    class Meta:
        ordering = ["requested_at", "id"]
        permissions = [("decide_approval", "Can approve or reject the agent's sensitive actions")]
        indexes = [models.Index(fields=["status", "requested_at"], name="approval_status_requested")]
        constraints = [
            models.UniqueConstraint(
                fields=["tool_call"], condition=models.Q(status="pending"), name="approval_one_pending_per_call"
            )
        ]

    def __str__(self) -> str:
        return f"approval {self.pk} for {self.tool_name} on #{self.ticket_id} ({self.status})"

    @property
    def amount_display(self) -> str:
        if self.amount_cents is None:
            return ""
        return format_money(self.amount_cents, self.currency)
