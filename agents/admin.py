"""Operations: every run, model step, tool call and lease is inspectable, and tickets are actionable."""

from __future__ import annotations

from collections.abc import Callable

from django.contrib import admin, messages
from django.core.exceptions import ValidationError
from django.db.models import Exists, OuterRef, QuerySet
from django.http import HttpRequest

from agents.models import AgentRun, ModelStep, Refund, RunStatus, TicketLease, ToolCall
from agents.refunds import refund_reconcile
from agents.tasks import ring
from tickets import services as ticket_services
from tickets.admin import ReadOnlyInline, TicketAdmin
from tickets.models import Ticket
from tickets.money import format_money


@admin.display(description="amount", ordering="amount_cents")
def refund_amount(refund: Refund) -> str:
    return format_money(refund.amount_cents, refund.currency)


class AgentRunInline(ReadOnlyInline):
    model = AgentRun
    fields = ["id", "status", "started_at", "ended_at", "model_name", "epochs", "prompt_tokens", "completion_tokens"]
    readonly_fields = fields
    show_change_link = True


class ToolCallTicketInline(ReadOnlyInline):
    model = ToolCall
    verbose_name_plural = "tool calls"
    fields = ["id", "run", "name", "status", "replay_policy", "idempotency_key", "attempts", "started_at"]
    readonly_fields = fields
    show_change_link = True


class RefundTicketInline(ReadOnlyInline):
    model = Refund
    fields = ["id", "order", "amount", "status", "provider_refund_id", "idempotency_key", "attempts"]
    readonly_fields = fields
    show_change_link = True

    @admin.display(description="amount")
    def amount(self, refund: Refund) -> str:
        return refund_amount(refund)


TicketAdmin.inlines = [*TicketAdmin.inlines, AgentRunInline, ToolCallTicketInline, RefundTicketInline]


class FailingTicketsFilter(admin.SimpleListFilter):
    """Tickets whose agent run is failing (retrying after errors) or was parked with a person."""

    title = "agent failures"
    parameter_name = "agent_failing"

    def lookups(self, request: HttpRequest, model_admin: admin.ModelAdmin) -> list[tuple[str, str]]:
        return [("failing", "Failing or parked")]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Ticket]) -> QuerySet[Ticket]:
        if self.value() != "failing":
            return queryset
        failing = AgentRun.objects.filter(
            ticket=OuterRef("pk"),
            failures__gt=0,
            status__in=[RunStatus.RUNNING, RunStatus.WAITING_APPROVAL, RunStatus.FAILED],
        )
        return queryset.filter(Exists(failing))


@admin.display(description="last agent error")
def last_agent_error(ticket: Ticket) -> str:
    error = (
        AgentRun.objects.filter(ticket=ticket, failures__gt=0)
        .exclude(last_error="")
        .order_by("-id")
        .values_list("last_error", flat=True)
        .first()
    )
    return (error or "")[:200]


TicketAdmin.list_filter = [*TicketAdmin.list_filter, FailingTicketsFilter]
TicketAdmin.list_display = [*TicketAdmin.list_display, last_agent_error]


@admin.action(description="Ring the agent for these tickets now")
def ring_agent(modeladmin: admin.ModelAdmin, request: HttpRequest, queryset: QuerySet[Ticket]) -> None:
    for ticket_id in queryset.values_list("pk", flat=True):
        ring(ticket_id)
    messages.success(request, f"Rang the agent for {queryset.count()} ticket(s).")


def _ticket_action(name: str, service: Callable[..., Ticket], description: str) -> Callable[..., None]:
    """A bulk action calling one ticket service per ticket, as the ticket page's buttons do."""

    def action(modeladmin: admin.ModelAdmin, request: HttpRequest, queryset: QuerySet[Ticket]) -> None:
        done: dict[str, int] = {}
        refused = []
        for ticket in queryset:
            try:
                ticket = service(ticket=ticket, user=request.user)
            except ValidationError as exc:
                refused.append(" ".join(exc.messages))
                continue
            status = ticket.get_status_display().lower()
            done[status] = done.get(status, 0) + 1
        for status, count in sorted(done.items()):
            messages.success(request, f"{count} ticket(s) now {status}.")
        for reason in refused:
            messages.error(request, reason)

    action.__name__ = name
    return admin.action(description=description)(action)


TicketAdmin.actions = [
    *(TicketAdmin.actions or []),
    ring_agent,
    # Handing back rings the agent itself (after commit), once per ticket.
    _ticket_action("move_to_open", ticket_services.ticket_hand_back, "Hand back to the agent"),
    _ticket_action("move_to_with_human", ticket_services.ticket_take_over, "Take over (agent stays out)"),
    _ticket_action("move_to_resolved", ticket_services.ticket_resolve, "Mark resolved"),
    _ticket_action("move_to_closed", ticket_services.ticket_close, "Close"),
]


class ModelStepInline(ReadOnlyInline):
    model = ModelStep
    fields = ["index", "attempt", "status", "finish_reason", "prompt_tokens", "completion_tokens", "wasted_tokens"]
    readonly_fields = fields
    show_change_link = True


class ToolCallInline(ReadOnlyInline):
    model = ToolCall
    fields = ["step", "index", "name", "status", "replay_policy", "idempotency_key", "attempts", "error"]
    readonly_fields = fields
    show_change_link = True


class ReadOnlyAdmin(admin.ModelAdmin):
    """The agent's ledger is written by the agent only."""

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False


@admin.register(AgentRun)
class AgentRunAdmin(ReadOnlyAdmin):
    list_display = ["id", "ticket", "status", "model_name", "started_at", "ended_at", "wasted_tokens", "failures"]
    list_filter = ["status", "model_name"]
    search_fields = ["ticket__id", "ticket__subject"]
    inlines = [ModelStepInline, ToolCallInline]


@admin.register(ModelStep)
class ModelStepAdmin(ReadOnlyAdmin):
    list_display = ["id", "run", "ticket", "index", "attempt", "status", "model_name", "completed_at"]
    list_filter = ["status", "model_name"]
    search_fields = ["ticket__id"]


@admin.register(ToolCall)
class ToolCallAdmin(ReadOnlyAdmin):
    list_display = ["id", "ticket", "run", "name", "status", "replay_policy", "attempts", "started_at"]
    list_filter = ["status", "name", "replay_policy"]
    search_fields = ["ticket__id", "idempotency_key", "name"]


@admin.register(TicketLease)
class TicketLeaseAdmin(ReadOnlyAdmin):
    list_display = ["ticket", "owner", "epoch", "expires_at", "acquired_at"]
    search_fields = ["ticket__id", "owner"]


@admin.action(description="Reconcile with the payment provider now")
def reconcile_refunds(modeladmin: admin.ModelAdmin, request: HttpRequest, queryset: QuerySet[Refund]) -> None:
    results: dict[str, int] = {}
    for refund in queryset.select_related("order"):
        status = refund_reconcile(refund=refund)
        results[status] = results.get(status, 0) + 1
    summary = ", ".join(f"{count} {status}" for status, count in sorted(results.items()))
    messages.success(request, f"Reconciled: {summary or 'nothing selected'}.")


@admin.register(Refund)
class RefundAdmin(ReadOnlyAdmin):
    list_display = ["id", "ticket", "order", refund_amount, "status", "provider_refund_id", "updated_at"]
    list_select_related = ["ticket", "order"]
    list_filter = ["status", "currency"]
    search_fields = ["ticket__id", "order__number", "idempotency_key", "provider_refund_id"]
    fields = [
        "ticket", "order", "tool_call", "idempotency_key", "amount", "reason", "status", "provider_status",
        "escalated_at", "provider_refund_id", "attempts", "error", "created_at", "updated_at",
    ]  # fmt: skip
    readonly_fields = ["amount"]
    actions = [reconcile_refunds]

    @admin.display(description="amount")
    def amount(self, refund: Refund) -> str:
        return refund_amount(refund)

    def get_actions(self, request: HttpRequest) -> dict:
        # Read-only admins still get the reconcile action (it only asks the provider).
        actions = super().get_actions(request)
        if "reconcile_refunds" not in actions:
            actions["reconcile_refunds"] = self.get_action(reconcile_refunds)
        return actions
