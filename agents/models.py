"""The agent's durable record: leases, runs, model steps and tool calls, all keyed by ticket."""

from __future__ import annotations

from django.conf import settings
from django.core.validators import MinValueValidator
from django.db import models
from django.db.models import Q
from django.utils import timezone

from tickets.models import Ticket
from tickets.money import format_money


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
    # The owner this epoch took the lease from without a release: non-empty means the
    # previous holder died (or lost the lease), so its unfinished work is a recovery.
    previous_owner = models.CharField(max_length=200, blank=True, default="")
    # The owner also holds the ticket's session-level advisory lock (agents.lease.lock_key):
    # Postgres drops it the moment the owner's connection dies, so a dead owner is seen at once.
    session_locked = models.BooleanField(default=False)
    # The owner's session ended while the owner lived on (the database cut it: a failover, a restart,
    # pg_terminate_backend), as its heartbeat saw: its lease is no longer held by a lock but kept
    # until the pass ends or the lease expires, and a take-over after it is an outage, not a stop.
    session_cut = models.BooleanField(default=False)

    def __str__(self) -> str:
        return f"lease on #{self.ticket_id}: {self.owner or 'free'} (epoch {self.epoch})"


# The outcome of a run that ended because a person took the ticket over, resolved or closed it.
PERSON_TOOK_OVER = "a person took the ticket over"
# A failure to start a run (no run to count it on) is counted on the ticket's timeline, in a row
# since the last of these events, or since a person last had the ticket (as a take-over ends a run
# and its failures): a run of the ticket starting, or the ticket parked. Written by agents.services,
# read by agents.selectors (``start_counted_since``).
START_FAILED = "agent_run_start_failed"
START_COUNTS_FROM = (START_FAILED, "agent_run_started", "agent_parked")
# How the error of a call closed without running begins (a retried answer or decision finds it by it).
NOT_RUN = "not run"
# Why an approved call was not run: the customer wrote after staff approved it, before it was carried
# out ("please cancel the refund"); the agent answers the message, and a call asked again is reviewed again.
CUSTOMER_WROTE = "the customer wrote after it was approved, before it was carried out"
# Why a refund the agent decided on its own (no review, no Confirm asked) was not run: the customer
# wrote after the conversation it was decided from was read, before it was carried out.
CUSTOMER_WROTE_UNREAD = "the customer wrote while it was being decided, before it was carried out"


class RunStatus(models.TextChoices):
    RUNNING = "running", "Running"
    WAITING_APPROVAL = "waiting_approval", "Waiting for approval"
    WAITING_CONFIRMATION = "waiting_confirmation", "Waiting for the customer to confirm"
    COMPLETED = "completed", "Completed"
    HANDED_OFF = "handed_off", "Handed off to a person"
    FAILED = "failed", "Failed"


RUN_TRANSITIONS: dict[str, frozenset[str]] = {
    RunStatus.RUNNING: frozenset(
        {
            RunStatus.WAITING_APPROVAL,
            RunStatus.WAITING_CONFIRMATION,
            RunStatus.COMPLETED,
            RunStatus.HANDED_OFF,
            RunStatus.FAILED,
        }
    ),
    # An approved call that the customer must confirm pauses again, on the customer.
    RunStatus.WAITING_APPROVAL: frozenset(
        {RunStatus.RUNNING, RunStatus.WAITING_CONFIRMATION, RunStatus.HANDED_OFF, RunStatus.FAILED}
    ),
    RunStatus.WAITING_CONFIRMATION: frozenset({RunStatus.RUNNING, RunStatus.HANDED_OFF, RunStatus.FAILED}),
    RunStatus.COMPLETED: frozenset(),
    RunStatus.HANDED_OFF: frozenset(),
    RunStatus.FAILED: frozenset(),
}

ACTIVE_RUN_STATUSES = (RunStatus.RUNNING, RunStatus.WAITING_APPROVAL, RunStatus.WAITING_CONFIRMATION)
ENDED_RUN_STATUSES = (RunStatus.COMPLETED, RunStatus.HANDED_OFF, RunStatus.FAILED)
# A run paused on a decision (staff or customer): rows only, no worker.
PAUSED_RUN_STATUSES = (RunStatus.WAITING_APPROVAL, RunStatus.WAITING_CONFIRMATION)


class AgentProfile(models.Model):
    """One version of what the agent is: its prompt, model, tools and approval policy.

    Versions are never changed once written (``agents.profiles`` makes the next one); one is
    active. A run pins the version it started with and keeps it to its end, across crashes,
    approval waits and deploys (DESIGN.md, invariant 18). Guardrails in code apply whatever a
    profile says.
    """

    version = models.PositiveIntegerField(unique=True)
    is_active = models.BooleanField(default=False)
    # Empty: the built-in prompt (agents.conversation.DEFAULT_SYSTEM_PROMPT).
    system_prompt = models.TextField(blank=True)
    # As AGENT_MODEL names it: "offline", "openai:<model>", or a class path (agents.model_factory).
    model = models.CharField(max_length=200, default="offline")
    model_parameters = models.JSONField(default=dict, blank=True)
    # The tools the agent may call: [{"name", "replay_policy", "requires_approval"}]. The replay
    # policy is the tool's own (in code), recorded so a version says what it ran with.
    tools = models.JSONField(default=list)
    # The approval policy's values (see ApprovalPolicy): threshold, limits, expiry, confirmation.
    approval_policy = models.JSONField(default=dict)
    note = models.CharField(max_length=300, blank=True, help_text="What changed in this version, and why")
    created_at = models.DateTimeField(default=timezone.now)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL)

    class Meta:
        ordering = ["-version"]
        constraints = [
            models.UniqueConstraint(fields=["is_active"], condition=Q(is_active=True), name="one_active_agent_profile"),
            models.CheckConstraint(condition=Q(version__gt=0), name="agent_profile_version_positive"),
        ]

    def __str__(self) -> str:
        return f"profile v{self.version}" + (" (active)" if self.is_active else "")


class AgentRun(models.Model):
    """One agent turn: from the customer messages it took in to a reply, a pause or a hand-off."""

    ticket = models.ForeignKey(Ticket, on_delete=models.CASCADE, related_name="agent_runs")
    status = models.CharField(max_length=20, choices=RunStatus.choices, default=RunStatus.RUNNING)
    # The customer messages this turn answers, in order.
    input_message_ids = models.JSONField(default=list, blank=True)
    model_name = models.CharField(max_length=200, blank=True)
    # The profile version this run started with and uses to its end (agents.profiles).
    profile = models.ForeignKey(AgentProfile, null=True, blank=True, on_delete=models.PROTECT, related_name="runs")
    # Lease epochs that worked on this run; more than one means it was resumed.
    epochs = models.JSONField(default=list, blank=True)
    recovery_notes = models.JSONField(default=list, blank=True)
    prompt_tokens = models.PositiveIntegerField(default=0)
    completion_tokens = models.PositiveIntegerField(default=0)
    wasted_tokens = models.PositiveIntegerField(default=0)
    outcome = models.TextField(blank=True)
    # Failures in a row (bad model output, a model outage, a tool or database error); reset by
    # progress. At AGENT_MAX_CONSECUTIVE_FAILURES the ticket is parked with a person.
    failures = models.PositiveIntegerField(default=0)
    last_error = models.TextField(blank=True)
    # After a failure: the sweeper leaves the run alone until then (the backoff).
    retry_not_before = models.DateTimeField(null=True, blank=True)
    # An outage of a dependency (agents.outage) under way for this run: when its first failure was
    # (the database's clock) and how many tries failed in it. Not counted in ``failures``: tried
    # again for AGENT_OUTAGE_PATIENCE_SECONDS from then, then parked. Cleared by progress.
    outage_since = models.DateTimeField(null=True, blank=True)
    outage_failures = models.PositiveIntegerField(default=0)
    started_at = models.DateTimeField(default=timezone.now)
    ended_at = models.DateTimeField(null=True, blank=True)
    # A paused run a person stopped (took the ticket while it waited, or it paused while they had it),
    # and the ticket was given back before a pass ended it: the sweeper rings it until one does.
    # Written by the transaction that gives the ticket back (agents.services.runs_note_stopped).
    stopped_by_person = models.BooleanField(default=False)

    class Meta:
        ordering = ["ticket", "started_at", "id"]
        constraints = [
            # At most one unfinished run per ticket (running, or paused for staff or for the customer).
            models.UniqueConstraint(
                fields=["ticket"],
                condition=Q(status__in=["running", "waiting_approval", "waiting_confirmation"]),
                name="one_active_run",
            )
        ]
        indexes = [
            models.Index(
                fields=["ticket"],
                condition=Q(stopped_by_person=True, status__in=["waiting_approval", "waiting_confirmation"]),
                name="run_paused_stopped_by_person",
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

    # No index of its own: model_step_unique_attempt (run, index, attempt) serves a run's steps. Every
    # index is written by every step; one that repeats another only costs the turn.
    run = models.ForeignKey(AgentRun, on_delete=models.CASCADE, related_name="steps", db_index=False)
    ticket = models.ForeignKey(Ticket, on_delete=models.CASCADE, related_name="model_steps")
    index = models.PositiveIntegerField()
    attempt = models.PositiveIntegerField(default=1)
    status = models.CharField(max_length=12, choices=StepStatus.choices, default=StepStatus.STARTED)
    model_name = models.CharField(max_length=200)
    # The request sent to the model is the request of ``request_prefix`` (an earlier step of the
    # same pass) followed by ``request_messages``; with no prefix, ``request_messages`` is all of
    # it. agents.conversation.request_of rebuilds the whole request.
    request_prefix = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.CASCADE, related_name="+", db_index=False
    )
    request_messages = models.JSONField(default=list)
    response_text = models.TextField(blank=True)
    tool_calls = models.JSONField(default=list, blank=True)
    finish_reason = models.CharField(max_length=32, blank=True)
    prompt_tokens = models.PositiveIntegerField(default=0)
    completion_tokens = models.PositiveIntegerField(default=0)
    # The server reported no usage: the counts are estimated from the text (agents.llm.estimate_tokens).
    usage_estimated = models.BooleanField(default=False)
    # Tokens of a generation cut off mid-stream, spent and thrown away.
    wasted_tokens = models.PositiveIntegerField(default=0)
    # Failed because the model endpoint was out of reach (agents.outage): not counted in AGENT_MAX_STEPS.
    outage = models.BooleanField(default=False)
    error = models.TextField(blank=True)
    epoch = models.BigIntegerField()
    # The ticket's timeline position when the step completed: where its tool calls
    # sit among the ticket's messages when a later turn rebuilds the conversation.
    ticket_seq = models.PositiveIntegerField(null=True, blank=True)
    # The ticket's timeline position when the conversation this step was written from was read:
    # a person's reply numbered after it is not in the step's request, and nothing the step asks to
    # say to the customer goes out after such a reply (None: a step stored before it was kept).
    read_seq = models.PositiveIntegerField(null=True, blank=True)
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
    AWAITING_CONFIRMATION = "awaiting_confirmation", "Awaiting the customer's confirmation"
    REJECTED = "rejected", "Rejected by staff"
    CANCELLED = "cancelled", "Not confirmed by the customer"


FINAL_CALL_STATUSES = (
    CallStatus.SUCCEEDED, CallStatus.FAILED, CallStatus.UNCERTAIN, CallStatus.REJECTED, CallStatus.CANCELLED
)  # fmt: skip
# A call paused on a decision (staff or customer).
PAUSED_CALL_STATUSES = (CallStatus.AWAITING_APPROVAL, CallStatus.AWAITING_CONFIRMATION)

# Where a call may go from each status (agents.calls, the one module that writes calls, checks it).
CALL_TRANSITIONS: dict[str, frozenset[str]] = {
    # Its effect ran (or could not), or recovery found it needs an approval it does not have.
    CallStatus.STARTED: frozenset(
        {CallStatus.SUCCEEDED, CallStatus.FAILED, CallStatus.UNCERTAIN, CallStatus.AWAITING_APPROVAL}
    ),
    # Approved (it runs, or waits for the customer), rejected, expired (failed), or asked again on
    # changed arguments.
    CallStatus.AWAITING_APPROVAL: frozenset(
        {
            CallStatus.STARTED,
            CallStatus.AWAITING_CONFIRMATION,
            CallStatus.REJECTED,
            CallStatus.FAILED,
            CallStatus.AWAITING_APPROVAL,
        }
    ),
    # Confirmed (it runs), cancelled or expired (not run), or asked again on changed arguments.
    CallStatus.AWAITING_CONFIRMATION: frozenset(
        {CallStatus.STARTED, CallStatus.CANCELLED, CallStatus.AWAITING_CONFIRMATION}
    ),
    CallStatus.SUCCEEDED: frozenset(),
    CallStatus.FAILED: frozenset(),
    CallStatus.UNCERTAIN: frozenset(),
    CallStatus.REJECTED: frozenset(),
    CallStatus.CANCELLED: frozenset(),
}


class ApprovalDecision(models.TextChoices):
    APPROVED = "approved", "Approved"
    REJECTED = "rejected", "Rejected"
    EXPIRED = "expired", "Expired"


class ConfirmationDecision(models.TextChoices):
    CONFIRMED = "confirmed", "Confirmed"
    CANCELLED = "cancelled", "Cancelled"
    EXPIRED = "expired", "Expired"


class ToolCall(models.Model):
    """A tool call, committed as ``started`` before its effect and finished after (intent before effect)."""

    ticket = models.ForeignKey(Ticket, on_delete=models.CASCADE, related_name="tool_calls")
    run = models.ForeignKey(AgentRun, on_delete=models.CASCADE, related_name="tool_calls")
    # Served by tool_call_unique_position (step, index), as ModelStep.run is.
    step = models.ForeignKey(ModelStep, on_delete=models.PROTECT, related_name="calls", db_index=False)
    index = models.PositiveIntegerField(help_text="Position among the calls the step requested")
    model_call_id = models.CharField(max_length=100)
    name = models.CharField(max_length=100)
    arguments = models.JSONField(default=dict, blank=True)
    # Derived from ticket, run, step and position: the same across every retry.
    # Unique by a constraint (tool_call_unique_key), not ``unique=True``: that adds a second index for
    # LIKE searches, which nothing makes.
    idempotency_key = models.CharField(max_length=120)
    replay_policy = models.CharField(max_length=8, choices=ReplayPolicy.choices)
    status = models.CharField(max_length=24, choices=CallStatus.choices, default=CallStatus.STARTED)
    result = models.JSONField(null=True, blank=True)
    error = models.TextField(blank=True)
    attempts = models.PositiveIntegerField(default=1)
    # A staff decision on a call that needed approval; the agent applies it on its next pass.
    # Decided in code with the intent, in the same transaction (DESIGN.md, invariant 11):
    # a call that needs an approval runs only with an approved decision on these arguments.
    approval_required = models.BooleanField(default=False)
    approval_reason = models.TextField(blank=True)
    approval_decision = models.CharField(max_length=8, null=True, blank=True, choices=ApprovalDecision.choices)
    approval_note = models.TextField(blank=True)
    # Digest of the arguments the decision was made on (see agents.approval.arguments_digest).
    approval_digest = models.CharField(max_length=64, blank=True)
    # A refund's approval: the ids of the refunds the payment provider held on the payment outside the
    # ledger, as the card staff approved showed them; None when the card showed none read. Money held
    # there outside the ledger beyond these, when the refund is about to be sent, hands it back to staff.
    approval_provider_seen = models.JSONField(null=True, blank=True)
    # A refund: the order its go-ahead was given on (the number as the order has it): the order its card
    # showed, once staff approved it; else the one it was checked and decided on (no approval needed) when
    # its intent was recorded. The model's number is read in any case, so the same words may name another
    # order later (one numbered exactly so, added since): the refund pays only this one.
    approval_order_number = models.CharField(max_length=32, blank=True)
    # The customer confirms some calls (a refund) in the chat before they run, after any approval:
    # the question they were asked, until when, and their decision on these exact arguments.
    confirmation_required = models.BooleanField(default=False)
    confirmation_text = models.TextField(blank=True)
    confirmation_expires_at = models.DateTimeField(null=True, blank=True)
    confirmation_decision = models.CharField(max_length=10, null=True, blank=True, choices=ConfirmationDecision.choices)
    confirmation_digest = models.CharField(max_length=64, blank=True)
    epoch = models.BigIntegerField()
    started_at = models.DateTimeField(default=timezone.now)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["run", "step__index", "index"]
        constraints = [
            models.UniqueConstraint(fields=["step", "index"], name="tool_call_unique_position"),
            models.UniqueConstraint(fields=["idempotency_key"], name="tool_call_unique_key"),
        ]
        # No index holds a column a call's outcome writes (its status, result, error, end), not even
        # in a partial index's condition: the outcome then updates the row in place, without a new
        # entry in every index of the table (PostgreSQL's HOT update), in every step of the loop. The
        # sweeps across tickets find paused calls through the runs that are still active (a few, by
        # ``one_active_run``), then their calls by run.

    def __str__(self) -> str:
        return f"{self.name} ({self.status}) on #{self.ticket_id}"


class RefundTold(models.TextChoices):
    """What the customer and staff were last told about a refund by the system (``Refund.told``): nothing
    yet (the agent's own reply speaks of a refund that goes as planned), or one of these outcomes."""

    NOTHING = "", "Nothing yet"
    FAILED = "failed", "Could not be completed"
    UNCONFIRMED = "unconfirmed", "Could not be confirmed"
    PENDING = "pending", "Being processed after all"
    PAID = "paid", "Paid after all"


class RefundStatus(models.TextChoices):
    REQUESTED = "requested", "Requested"
    SUBMITTED = "submitted", "Submitted to the provider"
    # The provider accepted it and has not settled it yet (Stripe: pending, requires_action).
    PENDING = "pending", "Pending at the provider"
    SUCCEEDED = "succeeded", "Succeeded"
    FAILED = "failed", "Failed"
    UNCERTAIN = "uncertain", "Uncertain (being reconciled)"


REFUND_TRANSITIONS: dict[str, frozenset[str]] = {
    RefundStatus.REQUESTED: frozenset({RefundStatus.SUBMITTED, RefundStatus.FAILED}),
    RefundStatus.SUBMITTED: frozenset(
        {RefundStatus.PENDING, RefundStatus.SUCCEEDED, RefundStatus.FAILED, RefundStatus.UNCERTAIN}
    ),
    RefundStatus.PENDING: frozenset({RefundStatus.SUCCEEDED, RefundStatus.FAILED}),
    RefundStatus.UNCERTAIN: frozenset(
        {RefundStatus.SUBMITTED, RefundStatus.PENDING, RefundStatus.SUCCEEDED, RefundStatus.FAILED}
    ),
    # Tried again under its key; or the provider shows it after all (a request still in flight when
    # the refund was given up on): the provider's record wins.
    RefundStatus.FAILED: frozenset({RefundStatus.SUBMITTED, RefundStatus.PENDING, RefundStatus.SUCCEEDED}),
    RefundStatus.SUCCEEDED: frozenset(),
}

# Refunds that count against what remains refundable: done, or possibly done.
RESERVING_REFUND_STATUSES = (
    RefundStatus.REQUESTED,
    RefundStatus.SUBMITTED,
    RefundStatus.PENDING,
    RefundStatus.SUCCEEDED,
    RefundStatus.UNCERTAIN,
)
# Refunds the reconciler settles from the provider's records.
OPEN_REFUND_STATUSES = (RefundStatus.SUBMITTED, RefundStatus.PENDING, RefundStatus.UNCERTAIN)


class Refund(models.Model):
    """One refund attempt of the agent, keyed like its tool call. The provider deduplicates by the same key."""

    ticket = models.ForeignKey(Ticket, on_delete=models.PROTECT, related_name="refunds")
    order = models.ForeignKey("tickets.Order", on_delete=models.PROTECT, related_name="refunds")
    tool_call = models.OneToOneField(ToolCall, on_delete=models.PROTECT, related_name="refund")
    idempotency_key = models.CharField(max_length=120, unique=True)
    amount_cents = models.PositiveBigIntegerField()
    currency = models.CharField(max_length=3)
    reason = models.TextField(blank=True)
    status = models.CharField(max_length=12, choices=RefundStatus.choices, default=RefundStatus.REQUESTED)
    # The provider's own word for the refund (succeeded, pending, requires_action, failed, canceled).
    provider_status = models.CharField(max_length=24, blank=True)
    # Set when the customer and a person were told that this refund did not go through.
    escalated_at = models.DateTimeField(null=True, blank=True)
    # The last outcome the customer and staff were told of, and how many moves were told so far: each
    # move told is the next episode of the refund's history, and its messages are keyed by its number.
    told = models.CharField(max_length=12, choices=RefundTold.choices, default=RefundTold.NOTHING, blank=True)
    tells = models.PositiveIntegerField(default=0)
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
        return f"refund {format_money(self.amount_cents, self.currency)} on {self.order_id} ({self.status})"


class ApprovalPolicy(models.Model):
    """The one policy row, edited in the admin: when a refund waits for a staff approval.

    Read by the agent when it records a call's intent (agents.policy); the table
    keeps the name it had when the approvals app held it.
    """

    refund_threshold_cents = models.PositiveBigIntegerField(
        default=20000,
        help_text="A refund needs a staff approval when it takes the order's refunds (done, pending or "
        "uncertain, plus this one) above this amount, in cents.",
    )
    customer_limit_cents = models.PositiveBigIntegerField(
        null=True,
        blank=True,
        help_text="A refund needs a staff approval when it takes the customer's refunds in the window above "
        "this amount, in cents. Empty: the same as the order threshold.",
    )
    customer_window_days = models.PositiveIntegerField(
        default=30,
        validators=[MinValueValidator(1)],
        help_text="The rolling window of the per-customer limit, in days.",
    )
    ttl_hours = models.PositiveIntegerField(
        default=72, validators=[MinValueValidator(1)], help_text="A request not decided in this time expires."
    )
    reminder_before_hours = models.PositiveIntegerField(
        default=12, help_text="Staff are reminded this long before a request expires."
    )
    customer_confirms_refunds = models.BooleanField(
        default=True,
        help_text="Before a refund is paid (after any staff approval), the customer confirms the amount in the "
        "chat with a button.",
    )
    confirmation_minutes = models.PositiveIntegerField(
        default=30,
        validators=[MinValueValidator(1)],
        help_text="A refund the customer has not confirmed in this time is not paid.",
    )

    class Meta:
        db_table = "approvals_approvalpolicy"
        verbose_name_plural = "approval policy"

    def __str__(self) -> str:
        return "Approval policy"

    @classmethod
    def current(cls) -> ApprovalPolicy:
        policy, _ = cls.objects.get_or_create(pk=1)
        return policy

    @property
    def customer_limit(self) -> int:
        return self.refund_threshold_cents if self.customer_limit_cents is None else self.customer_limit_cents


class ToolApprovalRule(models.Model):
    """Per-tool setting: every call of this tool needs an approval."""

    tool_name = models.CharField(max_length=100, unique=True)
    requires_approval = models.BooleanField(default=True)

    class Meta:
        db_table = "approvals_toolapprovalrule"

    def __str__(self) -> str:
        return f"{self.tool_name}: {'approval' if self.requires_approval else 'no approval'}"
