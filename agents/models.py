"""The agent's durable record: leases, runs, model steps and tool calls, all keyed by ticket."""

from __future__ import annotations

from django.db import models
from django.db.models import Q
from django.utils import timezone

from tickets.models import Ticket


class TicketLease(models.Model):
    """Who may advance a ticket right now. Taken and renewed with conditional UPDATEs.

    ``epoch`` grows by one at every take-over; every write of a run checks it
    (fencing), so a worker that lost the lease cannot write after another took it.
    """

    ticket = models.OneToOneField(Ticket, on_delete=models.CASCADE, primary_key=True, related_name="lease")
    owner = models.CharField(max_length=200, blank=True)
    epoch = models.BigIntegerField(default=0)
    expires_at = models.DateTimeField(default=timezone.now)
    acquired_at = models.DateTimeField(default=timezone.now)

    def __str__(self) -> str:
        return f"lease on #{self.ticket_id}: {self.owner or 'free'} (epoch {self.epoch})"


class RunStatus(models.TextChoices):
    RUNNING = "running", "Running"
    WAITING_APPROVAL = "waiting_approval", "Waiting for approval"
    COMPLETED = "completed", "Completed"
    HANDED_OFF = "handed_off", "Handed off to a person"
    FAILED = "failed", "Failed"


RUN_TRANSITIONS: dict[str, frozenset[str]] = {
    RunStatus.RUNNING: frozenset(
        {RunStatus.WAITING_APPROVAL, RunStatus.COMPLETED, RunStatus.HANDED_OFF, RunStatus.FAILED}
    ),
    RunStatus.WAITING_APPROVAL: frozenset({RunStatus.RUNNING, RunStatus.HANDED_OFF, RunStatus.FAILED}),
    RunStatus.COMPLETED: frozenset(),
    RunStatus.HANDED_OFF: frozenset(),
    RunStatus.FAILED: frozenset(),
}

ACTIVE_RUN_STATUSES = (RunStatus.RUNNING, RunStatus.WAITING_APPROVAL)


class AgentRun(models.Model):
    """One agent turn: from the customer messages it took in to a reply, a pause or a hand-off."""

    ticket = models.ForeignKey(Ticket, on_delete=models.CASCADE, related_name="agent_runs")
    status = models.CharField(max_length=20, choices=RunStatus.choices, default=RunStatus.RUNNING)
    # The customer messages this turn answers, in order.
    input_message_ids = models.JSONField(default=list, blank=True)
    model_name = models.CharField(max_length=200, blank=True)
    # Lease epochs that worked on this run; more than one means it was resumed.
    epochs = models.JSONField(default=list, blank=True)
    recovery_notes = models.JSONField(default=list, blank=True)
    prompt_tokens = models.PositiveIntegerField(default=0)
    completion_tokens = models.PositiveIntegerField(default=0)
    wasted_tokens = models.PositiveIntegerField(default=0)
    outcome = models.TextField(blank=True)
    started_at = models.DateTimeField(default=timezone.now)
    ended_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["ticket", "started_at", "id"]
        constraints = [
            # At most one unfinished run per ticket.
            models.UniqueConstraint(
                fields=["ticket"], condition=Q(status__in=["running", "waiting_approval"]), name="one_active_run"
            )
        ]

    def __str__(self) -> str:
        return f"run {self.pk} on #{self.ticket_id} ({self.status})"


class StepStatus(models.TextChoices):
    STARTED = "started", "Started"
    COMPLETED = "completed", "Completed"
    INTERRUPTED = "interrupted", "Interrupted (generated again)"
    FAILED = "failed", "Failed"


class ModelStep(models.Model):
    """One call to the model. Stored once complete and reused on recovery, never regenerated."""

    run = models.ForeignKey(AgentRun, on_delete=models.CASCADE, related_name="steps")
    ticket = models.ForeignKey(Ticket, on_delete=models.CASCADE, related_name="model_steps")
    index = models.PositiveIntegerField()
    attempt = models.PositiveIntegerField(default=1)
    status = models.CharField(max_length=12, choices=StepStatus.choices, default=StepStatus.STARTED)
    model_name = models.CharField(max_length=200)
    request_messages = models.JSONField(default=list)
    response_text = models.TextField(blank=True)
    tool_calls = models.JSONField(default=list, blank=True)
    finish_reason = models.CharField(max_length=32, blank=True)
    prompt_tokens = models.PositiveIntegerField(default=0)
    completion_tokens = models.PositiveIntegerField(default=0)
    # Tokens of a generation cut off mid-stream, spent and thrown away.
    wasted_tokens = models.PositiveIntegerField(default=0)
    error = models.TextField(blank=True)
    epoch = models.BigIntegerField()
    started_at = models.DateTimeField(default=timezone.now)
    completed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["run", "index", "attempt"]
        constraints = [
            models.UniqueConstraint(fields=["run", "index", "attempt"], name="model_step_unique_attempt"),
            models.UniqueConstraint(
                fields=["run", "index"], condition=Q(status="completed"), name="model_step_one_completed"
            ),
        ]

    def __str__(self) -> str:
        return f"step {self.index}.{self.attempt} of run {self.run_id} ({self.status})"


class ReplayPolicy(models.TextChoices):
    SAFE = "safe", "Safe to run again"
    KEYED = "keyed", "Deduplicated by idempotency key"
    NEVER = "never", "Never repeated automatically"


class CallStatus(models.TextChoices):
    STARTED = "started", "Started"
    SUCCEEDED = "succeeded", "Succeeded"
    FAILED = "failed", "Failed"
    UNCERTAIN = "uncertain", "Uncertain (may have taken effect)"
    AWAITING_APPROVAL = "awaiting_approval", "Awaiting approval"
    REJECTED = "rejected", "Rejected by staff"


FINAL_CALL_STATUSES = (CallStatus.SUCCEEDED, CallStatus.FAILED, CallStatus.UNCERTAIN, CallStatus.REJECTED)


class ToolCall(models.Model):
    """A tool call, committed as ``started`` before its effect and finished after (intent before effect)."""

    ticket = models.ForeignKey(Ticket, on_delete=models.CASCADE, related_name="tool_calls")
    run = models.ForeignKey(AgentRun, on_delete=models.CASCADE, related_name="tool_calls")
    step = models.ForeignKey(ModelStep, on_delete=models.PROTECT, related_name="calls")
    index = models.PositiveIntegerField(help_text="Position among the calls the step requested")
    model_call_id = models.CharField(max_length=100)
    name = models.CharField(max_length=100)
    arguments = models.JSONField(default=dict, blank=True)
    # Derived from ticket, run, step and position: the same across every retry.
    idempotency_key = models.CharField(max_length=120, unique=True)
    replay_policy = models.CharField(max_length=8, choices=ReplayPolicy.choices)
    status = models.CharField(max_length=20, choices=CallStatus.choices, default=CallStatus.STARTED)
    result = models.JSONField(null=True, blank=True)
    error = models.TextField(blank=True)
    attempts = models.PositiveIntegerField(default=1)
    # A staff decision on a call that needed approval; the agent applies it on its next pass.
    approval_decision = models.CharField(
        max_length=8,
        null=True,
        blank=True,
        choices=[("approved", "Approved"), ("rejected", "Rejected"), ("expired", "Expired")],
    )
    approval_note = models.TextField(blank=True)
    # Digest of the arguments the decision was made on (see agents.approval.arguments_digest).
    approval_digest = models.CharField(max_length=64, blank=True)
    epoch = models.BigIntegerField()
    started_at = models.DateTimeField(default=timezone.now)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["run", "step__index", "index"]
        constraints = [models.UniqueConstraint(fields=["step", "index"], name="tool_call_unique_position")]
        indexes = [models.Index(fields=["status"], name="tool_call_status")]

    def __str__(self) -> str:
        return f"{self.name} ({self.status}) on #{self.ticket_id}"


class RefundStatus(models.TextChoices):
    REQUESTED = "requested", "Requested"
    SUBMITTED = "submitted", "Submitted to the provider"
    SUCCEEDED = "succeeded", "Succeeded"
    FAILED = "failed", "Failed"
    UNCERTAIN = "uncertain", "Uncertain (being reconciled)"


REFUND_TRANSITIONS: dict[str, frozenset[str]] = {
    RefundStatus.REQUESTED: frozenset({RefundStatus.SUBMITTED, RefundStatus.FAILED}),
    RefundStatus.SUBMITTED: frozenset({RefundStatus.SUCCEEDED, RefundStatus.FAILED, RefundStatus.UNCERTAIN}),
    RefundStatus.UNCERTAIN: frozenset({RefundStatus.SUBMITTED, RefundStatus.SUCCEEDED, RefundStatus.FAILED}),
    RefundStatus.FAILED: frozenset({RefundStatus.SUBMITTED}),
    RefundStatus.SUCCEEDED: frozenset(),
}

# Refunds that count against what remains refundable: done, or possibly done.
RESERVING_REFUND_STATUSES = (
    RefundStatus.REQUESTED,
    RefundStatus.SUBMITTED,
    RefundStatus.SUCCEEDED,
    RefundStatus.UNCERTAIN,
)


class Refund(models.Model):
    """One refund attempt of the agent, keyed like its tool call. The provider deduplicates by the same key."""

    ticket = models.ForeignKey(Ticket, on_delete=models.PROTECT, related_name="refunds")
    order = models.ForeignKey("tickets.Order", on_delete=models.PROTECT, related_name="refunds")
    tool_call = models.OneToOneField(ToolCall, on_delete=models.PROTECT, related_name="refund")
    idempotency_key = models.CharField(max_length=120, unique=True)
    amount_cents = models.PositiveIntegerField()
    currency = models.CharField(max_length=3)
    reason = models.TextField(blank=True)
    status = models.CharField(max_length=12, choices=RefundStatus.choices, default=RefundStatus.REQUESTED)
    provider_refund_id = models.CharField(max_length=100, null=True, blank=True, unique=True)
    attempts = models.PositiveIntegerField(default=0)
    error = models.TextField(blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["-created_at"]
        constraints = [models.CheckConstraint(condition=Q(amount_cents__gt=0), name="refund_amount_positive")]
        indexes = [models.Index(fields=["status", "updated_at"], name="refund_status_updated")]

    def __str__(self) -> str:
        return f"refund {self.amount_cents} {self.currency} on {self.order_id} ({self.status})"
