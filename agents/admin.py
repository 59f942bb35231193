"""Operations: every run, model step, tool call and lease is inspectable, and tickets are actionable."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import ImproperlyConfigured, PermissionDenied, ValidationError
from django.db import connection
from django.db.models import Count, Exists, OuterRef, QuerySet, Subquery
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.utils.html import format_html

from agents.model_factory import get_model
from agents.models import AgentProfile, AgentRun, ModelStep, Refund, RunStatus, TicketLease, ToolCall
from agents.profiles import (
    CONTENT_FIELDS,
    ActivationRefused,
    MoveRefused,
    active_profile,
    approval_policy_cleaned,
    model_parameters_problems,
    profile_activate,
    profile_active_locked,
    profile_diff,
    profile_new_version,
    run_move_to_active,
    tools_problems,
    version_changed_words,
)
from agents.refunds import ReconcileRound, refund_reconcile
from agents.selectors import refund_asked_on, refunded_total_cents
from agents.tasks import ring
from agents.tools import REGISTRY
from tickets import pages
from tickets import services as ticket_services
from tickets.admin import IdsChecked, OfATicket, OrderAdmin, OrderAdminForm, ReadOnlyInline, StaffUserAdmin, TicketAdmin
from tickets.models import Ticket
from tickets.money import format_money


@admin.display(description="amount", ordering="amount_cents")
def refund_amount(refund: Refund) -> str:
    if refund.amount_cents is None:
        return ""  # an empty row (a page shown again after a hand-made form count): no amount to show
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


# A profile version names who saved it: that person is not deleted from the admin either.
if (AgentProfile, "created_by") not in StaffUserAdmin.named_on_the_ledger:
    StaffUserAdmin.named_on_the_ledger.append((AgentProfile, "created_by"))


# The order's admin keeps what it was paid against once money was asked for on it, and its total no
# lower than what was refunded on it.
if refund_asked_on not in OrderAdmin.money_asked_on:
    OrderAdmin.money_asked_on.append(refund_asked_on)
if refunded_total_cents not in OrderAdminForm.refunded_on:
    OrderAdminForm.refunded_on.append(refunded_total_cents)


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


def _last_errors(ticket: Any) -> QuerySet[AgentRun]:
    """The last errors of the ticket's runs that failed, newest first (``ticket``: a ticket or an OuterRef)."""
    return (
        AgentRun.objects.filter(ticket=ticket, failures__gt=0)
        .exclude(last_error="")
        .order_by("-id")
        .values_list("last_error", flat=True)
    )


@admin.display(description="last agent error")
def last_agent_error(ticket: Ticket) -> str:
    if hasattr(ticket, "last_agent_error_text"):  # read with the list's page, in its one query
        error = ticket.last_agent_error_text
    else:
        error = _last_errors(ticket).first()
    return (error or "")[:200]


_tickets = TicketAdmin.get_queryset


def _tickets_with_last_agent_error(self: TicketAdmin, request: HttpRequest) -> QuerySet[Ticket]:
    """The admin's tickets, each with its last agent error: the list reads it with its page, not
    with a query per row."""
    return _tickets(self, request).annotate(last_agent_error_text=Subquery(_last_errors(OuterRef("pk"))[:1]))


TicketAdmin.get_queryset = _tickets_with_last_agent_error  # type: ignore[method-assign]


TicketAdmin.list_filter = [*TicketAdmin.list_filter, FailingTicketsFilter]
TicketAdmin.list_display = [*TicketAdmin.list_display, last_agent_error]


@admin.action(description="Ring the agent for these tickets now", permissions=["change"])
def ring_agent(modeladmin: admin.ModelAdmin, request: HttpRequest, queryset: QuerySet[Ticket]) -> None:
    for ticket_id in queryset.values_list("pk", flat=True):
        ring(ticket_id)
    messages.success(request, f"Rang the agent for {queryset.count()} ticket(s).")


# How many tickets left as they were a bulk action names, one sentence each; the others are counted.
_UNCHANGED_SHOWN = 10


def _ticket_action(
    name: str,
    service: Callable[..., Ticket],
    description: str,
    permissions: tuple[str, ...] = ("change",),
    *,
    reads_seen: bool = False,
    **options: Any,
) -> Callable[..., None]:
    """A bulk action calling one ticket service per ticket (with ``options``), as the ticket page's
    buttons do. ``reads_seen``: the service takes ``seen_seq``, what the list showed of each ticket
    (``tickets.pages.seen_on_the_list``), and refuses a ticket the customer wrote on since."""

    def action(modeladmin: admin.ModelAdmin, request: HttpRequest, queryset: QuerySet[Ticket]) -> None:
        if not all(getattr(modeladmin, f"has_{needed}_permission")(request) for needed in permissions):
            raise PermissionDenied  # offered only with these permissions; refused all the same
        done: dict[str, int] = {}
        refused, unchanged = [], []
        for ticket in queryset:
            seen = {"seen_seq": pages.seen_on_the_list(request, ticket)} if reads_seen else {}
            try:
                ticket = service(ticket=ticket, user=request.user, **seen, **options)
            except ValidationError as exc:
                refused.append(" ".join(exc.messages))
                continue
            if ticket_services.nothing_changed(ticket):
                unchanged.append(ticket_services.nothing_changed(ticket))
                continue
            status = ticket.get_status_display().lower()
            done[status] = done.get(status, 0) + 1
        for status, count in sorted(done.items()):
            messages.success(request, f"{count} ticket(s) now {status}.")
        if unchanged:
            # One message for them all: a bulk action over many tickets listed one line per ticket.
            shown = " ".join(unchanged[:_UNCHANGED_SHOWN])
            more = len(unchanged) - _UNCHANGED_SHOWN
            tail = f" And {more} more ticket(s) already as asked." if more > 0 else ""
            messages.info(request, f"Nothing was changed on {len(unchanged)} ticket(s): {shown}{tail}")
        for reason in refused:
            messages.error(request, reason)

    action.__name__ = name
    return admin.action(description=description, permissions=list(permissions))(action)


TicketAdmin.actions = [
    *(TicketAdmin.actions or []),
    ring_agent,
    # Handing back rings the agent itself (after commit), once per ticket. The list does not say who
    # had each ticket when it was read: handing back, resolving or closing a ticket a colleague has
    # would end their conversation, so it is refused (as taking it over is); its page can do it.
    # A ticket handed to a person after the list was read (the customer asked for one) is left too.
    _ticket_action(
        "move_to_open",
        ticket_services.ticket_hand_back,
        "Hand back to the agent",
        reads_seen=True,
        spare_colleagues=True,
    ),  # fmt: skip
    # Taking over makes the person the ticket's holder: only someone who may work tickets. A ticket
    # someone else resolved or assigned after the list was read is left (it would be reopened, or
    # taken from its assignee).
    _ticket_action(
        "move_to_with_human",
        ticket_services.ticket_take_over,
        "Take over (agent stays out)",
        ("change", "handle"),
        reads_seen=True,
    ),
    # Resolving or closing leaves the customer's next words to nobody: a ticket the customer wrote on
    # after the list was read is refused, as its page's buttons refuse it.
    _ticket_action(
        "move_to_resolved", ticket_services.ticket_resolve, "Mark resolved", reads_seen=True, spare_colleagues=True
    ),
    _ticket_action("move_to_closed", ticket_services.ticket_close, "Close", reads_seen=True, spare_colleagues=True),
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


class ReadOnlyAdmin(OfATicket, IdsChecked):
    """The agent's ledger is written by the agent only. A ticket's number in the search lists its rows (OfATicket)."""

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
    search_fields = ["ticket__subject"]
    inlines = [ModelStepInline, ToolCallInline]


@admin.register(ModelStep)
class ModelStepAdmin(ReadOnlyAdmin):
    list_display = ["id", "run", "ticket", "index", "attempt", "status", "model_name", "completed_at"]
    list_filter = ["status", "model_name"]
    search_fields = ["model_name"]  # and a ticket's number (OfATicket)


@admin.register(ToolCall)
class ToolCallAdmin(ReadOnlyAdmin):
    list_display = ["id", "ticket", "run", "name", "status", "replay_policy", "attempts", "started_at"]
    list_filter = ["status", "name", "replay_policy"]
    search_fields = ["idempotency_key", "name"]


@admin.register(TicketLease)
class TicketLeaseAdmin(ReadOnlyAdmin):
    list_display = ["ticket", "owner", "epoch", "expires_at", "acquired_at"]
    search_fields = ["owner"]


# Reconciling writes (a refund settled or failed, the customer told, the ticket handed to a person):
# offered to, and done for, staff who may change refunds only; each change names who asked for it.
RECONCILE_PERMISSION = "agents.change_refund"


@admin.action(description="Reconcile with the payment provider now", permissions=["reconcile"])
def reconcile_refunds(modeladmin: admin.ModelAdmin, request: HttpRequest, queryset: QuerySet[Refund]) -> None:
    if not request.user.has_perm(RECONCILE_PERMISSION):
        raise PermissionDenied
    results: dict[str, int] = {}
    # One round for the selection, as the reconciler's: a provider that does not answer is asked once,
    # not once a refund (a timeout each held the page for as many timeouts as refunds were selected).
    this_round = ReconcileRound()
    for refund in queryset.select_related("order"):
        status = refund_reconcile(refund=refund, by=request.user, this_round=this_round)
        results[status] = results.get(status, 0) + 1
    summary = ", ".join(f"{count} {status}" for status, count in sorted(results.items()))
    if this_round.unreachable is not None:
        messages.warning(
            request,
            f"The payment provider did not answer ({this_round.unreachable}). Refunds now: {summary}. Those still "
            "open are asked again at the reconciler's next round; any open too long went to a person.",
        )
        return
    messages.success(request, f"Reconciled: {summary or 'nothing selected'}.")


@admin.register(Refund)
class RefundAdmin(ReadOnlyAdmin):
    list_display = ["id", "ticket", "order", refund_amount, "status", "provider_refund_id", "updated_at"]
    list_select_related = ["ticket", "order"]
    list_filter = ["status", "currency"]
    search_fields = ["order__number", "idempotency_key", "provider_refund_id"]
    fields = [
        "ticket", "order", "tool_call", "idempotency_key", "amount", "reason", "status", "provider_status",
        "escalated_at", "told", "tells", "provider_refund_id", "attempts", "error", "created_at", "updated_at",
    ]  # fmt: skip
    readonly_fields = ["amount"]
    actions = [reconcile_refunds]

    @admin.display(description="amount")
    def amount(self, refund: Refund) -> str:
        return refund_amount(refund)

    def has_reconcile_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm(RECONCILE_PERMISSION)

    def get_actions(self, request: HttpRequest) -> dict:
        # The refunds are read-only here; the reconcile action is offered to those who may use it.
        actions = super().get_actions(request)
        if "reconcile_refunds" not in actions and self.has_reconcile_permission(request):
            actions["reconcile_refunds"] = self.get_action(reconcile_refunds)
        return actions


# --- Agent profiles: versions are never edited; saving makes the next version ---------------------


class AgentProfileForm(forms.ModelForm):
    make_active = forms.BooleanField(
        required=False, initial=True, help_text="New runs start with this version; runs already started keep theirs."
    )
    # The version that was active when the page was read. A save makes the next version from all the
    # page shows: after another version became active it would put back, active, what that one changed
    # (a stricter approval rule), unseen.
    active_version = forms.IntegerField(widget=forms.HiddenInput, required=False)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields["active_version"].initial = active_profile().version

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean()
        spec, parameters = cleaned.get("model"), cleaned.get("model_parameters")
        if spec and parameters:
            # Built as a run on the version builds it: a class of one's own is given the parameters.
            try:
                get_model(spec, parameters=parameters)
            except ImproperlyConfigured as exc:
                self.add_error("model_parameters", str(exc))
            except Exception as exc:  # noqa: BLE001 - a class that cannot be built so: said on the field
                self.add_error("model_parameters", f"{spec!r} cannot be built with them: {type(exc).__name__}: {exc}")
        read = cleaned.get("active_version")
        if read is None:
            return cleaned
        active = active_profile()
        if connection.in_atomic_block:
            # Held until the save (the admin saves in this transaction): an activation in flight lands
            # first and is seen here, or waits for the new version.
            active = profile_active_locked() or active
        if active.version != read:
            by = active.created_by.get_username() if active.created_by_id else "the system"
            raise forms.ValidationError(
                f"Version {active.version} (saved by {by}) was made active since this page was opened; nothing was "
                "saved. Open the active version and make your change again."
            )
        return cleaned

    class Meta:
        model = AgentProfile
        fields = ["system_prompt", "model", "model_parameters", "tools", "approval_policy", "note"]

    def clean_tools(self) -> list[dict]:
        tools = self.cleaned_data["tools"]
        problems = tools_problems(tools)
        if problems:
            raise forms.ValidationError(problems)
        # The replay policy is the tool's own (code); the version records it.
        return [
            {"name": t["name"], "replay_policy": REGISTRY[t["name"]].replay_policy,
             "requires_approval": t.get("requires_approval", False)}
            for t in tools
        ]  # fmt: skip

    def clean_approval_policy(self) -> dict:
        cleaned, problems = approval_policy_cleaned(self.cleaned_data["approval_policy"])
        if problems:
            raise forms.ValidationError(problems)
        return cleaned

    def clean_model_parameters(self) -> dict[str, Any]:
        parameters = self.cleaned_data["model_parameters"]
        if parameters in (None, ""):
            return {}
        problems = model_parameters_problems(parameters)
        if problems:
            raise forms.ValidationError(problems)
        return parameters

    def clean_model(self) -> str:
        spec = self.cleaned_data["model"].strip()
        try:
            get_model(spec)
        except ImproperlyConfigured as exc:
            raise forms.ValidationError(str(exc)) from None
        except Exception as exc:  # noqa: BLE001 - a class that cannot be built: said on the field, not a 500
            raise forms.ValidationError(f"{spec!r} cannot be built: {type(exc).__name__}: {exc}") from None
        return spec


# Changing what the agent is, or which version a run is on, is for staff who may change profiles or
# runs; the admin's read-only ledger access (the support group) sees neither action.
PROFILE_PERMISSION = "agents.change_agentprofile"
MOVE_RUN_PERMISSION = "agents.change_agentrun"


@admin.action(description="Make this version active (new runs start with it)", permissions=["change"])
def activate_profile(modeladmin: admin.ModelAdmin, request: HttpRequest, queryset: QuerySet[AgentProfile]) -> None:
    if not request.user.has_perm(PROFILE_PERMISSION):
        raise PermissionDenied
    if queryset.count() != 1:
        messages.error(request, "Choose one version to make active.")
        return
    # The version the list showed active (its hidden field): another one made active since is refused.
    try:
        profile = profile_activate(
            version=queryset.get().version, user=request.user, active_seen=pages.page_read(request, "active_version")
        )
    except ActivationRefused as exc:
        messages.error(request, exc.messages[0])
        return
    messages.success(request, f"Version {profile.version} is active.")


@admin.register(AgentProfile)
class AgentProfileAdmin(IdsChecked):
    """Open a version and save it to make the next one: the one opened is never changed."""

    form = AgentProfileForm
    list_display = ["version", "is_active", "model", "note", "created_at", "created_by", "runs_count"]
    readonly_fields = ["version", "is_active", "created_at", "created_by", "changes"]
    actions = [activate_profile]
    list_select_related = ["created_by"]

    def changelist_view(self, request: HttpRequest, extra_context: dict[str, Any] | None = None) -> HttpResponse:
        """The list, carrying the version it shows active: "Make this version active" sends it back."""
        shown = {"active_version": active_profile().version}
        return super().changelist_view(request, {**shown, **(extra_context or {})})

    def get_queryset(self, request: HttpRequest) -> QuerySet[AgentProfile]:
        # Each version's runs counted in the list's query, not one query per row.
        return super().get_queryset(request).annotate(runs_total=Count("runs"))

    def get_fields(self, request: HttpRequest, obj: AgentProfile | None = None) -> list[str]:
        editable = [
            "system_prompt", "model", "model_parameters", "tools", "approval_policy", "note", "make_active",
            "active_version",
        ]  # fmt: skip
        if not request.user.has_perm(PROFILE_PERMISSION):  # saved, never made active (``save_model``)
            editable.remove("make_active")
        return ["version", "is_active", "created_at", "created_by", "changes", *editable] if obj else editable

    @admin.display(description="runs", ordering="runs_total")
    def runs_count(self, profile: AgentProfile) -> int:
        return profile.runs_total if hasattr(profile, "runs_total") else profile.runs.count()

    @admin.display(description="changes from the version before")
    def changes(self, profile: AgentProfile) -> str:
        diff = profile_diff(profile)
        return format_html("<pre>{}</pre>", diff) if diff else "(the first version)"

    def has_delete_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False

    def save_model(self, request: HttpRequest, obj: AgentProfile, form: AgentProfileForm, change: bool) -> None:
        changes = {name: form.cleaned_data[name] for name in CONTENT_FIELDS}
        asked = form.cleaned_data.get("make_active", False)
        # Which version new runs use is changed only by staff who may change profiles, as the "Make this
        # version active" action asks: one who may only add versions drafts one, whatever the form says.
        activate = asked and request.user.has_perm(PROFILE_PERMISSION)
        made = profile_new_version(
            changes=changes, user=request.user, note=form.cleaned_data.get("note", ""), activate=activate,
        )  # fmt: skip
        if asked and not activate:
            messages.warning(
                request,
                f"Version {made.version} was not made active: making a version active needs the permission to "
                "change agent profiles. Ask someone who has it.",
            )
        form.instance = obj = made  # the response names the new version, not the one opened
        obj.pk = made.pk

    def response_change(self, request: HttpRequest, obj: AgentProfile) -> HttpResponse:
        messages.success(request, f"Saved as version {obj.version}; the version you opened is unchanged.")
        return redirect("admin:agents_agentprofile_change", obj.pk)

    def response_add(
        self, request: HttpRequest, obj: AgentProfile, post_url_continue: str | None = None
    ) -> HttpResponse:
        active = "" if obj.is_active else f" It is not active; version {active_profile().version} is."
        messages.success(request, f"Saved as version {obj.version}.{active}")
        return redirect("admin:agents_agentprofile_change", obj.pk)


@admin.action(description="Move paused runs to the active profile version", permissions=["move"])
def move_runs_to_active(modeladmin: admin.ModelAdmin, request: HttpRequest, queryset: QuerySet[AgentRun]) -> None:
    if not request.user.has_perm(MOVE_RUN_PERMISSION):
        raise PermissionDenied
    # The version the list showed as active (its hidden field): the runs go there or nowhere. A
    # request that sends none (not from the list) moves them to the version active at the move.
    seen = pages.page_read(request, "active_version")
    active = active_profile().version
    if seen is not None and seen != active:
        messages.error(request, f"{version_changed_words(active, seen)} No run was moved.")
        return
    moved, refused = 0, []
    for run in queryset:
        try:
            moved += run_move_to_active(run=run, user=request.user, version_seen=seen if seen is not None else active)
        except MoveRefused as exc:
            refused.append(exc.messages[0])
    skipped = queryset.count() - moved - len(refused)
    messages.success(
        request,
        f"Moved {moved} run(s) to version {seen if seen is not None else active}"
        + (f"; {skipped} left as they were (not paused, or on it already)." if skipped else "."),
    )
    for reason in refused:
        messages.warning(request, reason)


def _run_list(self: admin.ModelAdmin, request: HttpRequest, extra_context: dict[str, Any] | None = None) -> Any:
    """The run list, saying which version is active: its move action sends it back (``active_version``)."""
    shown = {"active_version": active_profile().version}
    return admin.ModelAdmin.changelist_view(self, request, {**shown, **(extra_context or {})})


@admin.display(description="profile", ordering="profile__version")
def profile_version(run: AgentRun) -> str:
    return f"v{run.profile.version}" if run.profile_id else "—"


AgentRunAdmin.list_display = [*AgentRunAdmin.list_display, profile_version]
AgentRunAdmin.list_select_related = ["ticket", "profile"]
AgentRunAdmin.actions = [move_runs_to_active]
AgentRunAdmin.has_move_permission = lambda self, request: request.user.has_perm(MOVE_RUN_PERMISSION)
AgentRunAdmin.changelist_view = _run_list  # type: ignore[method-assign]
AgentRunInline.fields = [*AgentRunInline.fields, "profile"]
AgentRunInline.readonly_fields = AgentRunInline.fields
