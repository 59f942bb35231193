from __future__ import annotations

from django import forms
from django.contrib import admin, messages
from django.urls import reverse
from django.utils import timezone
from django.utils.formats import localize
from django.utils.html import format_html, format_html_join

from agents.models import ApprovalPolicy, ToolApprovalRule
from agents.profiles import (
    POLICY_FIELDS,
    active_profile,
    enabled_tools,
    policy_time_problems,
    policy_values,
    profile_follow_policy_tables,
)
from approvals import selectors
from approvals.models import ApprovalRequest
from tickets.admin import IdsChecked, OfATicket, PageReadForm, ReadOnlyInline, TicketAdmin
from tickets.money import format_money


class FollowsTheActiveVersion(PageReadForm):
    """A page of approval rules, saved only if the agent profile version it was read under is still the
    active one: saved after another version became active, it would put back the values that version
    changed (the page showed them). And, as any page that carries what it read (``PageReadForm``), it
    writes only what the person changed on it: a rule tightened in the tables since it was read (a
    shell, a data migration) is not put back by the values it showed."""

    profile_version = forms.IntegerField(widget=forms.HiddenInput)

    def __init__(self, *args, **kwargs) -> None:  # noqa: ANN002, ANN003
        super().__init__(*args, **kwargs)
        self.fields["profile_version"].initial = active_profile().version

    def clean(self) -> dict:
        cleaned = super().clean()
        active = active_profile().version
        # The same page sent twice (a double click on Save) finds the version its first sending made: its
        # change is saved already, nothing to refuse (and no version is made for it again).
        if cleaned.get("profile_version") != active and not self.already_as_asked():
            raise forms.ValidationError(
                f"The agent profile changed since this page was opened (version {active} is active now). "
                "Reload the page and make your change again."
            )
        return cleaned


def _tell_the_version(request, version) -> None:  # noqa: ANN001
    if version is None:
        messages.info(request, "Nothing the agent uses changed; no new profile version.")
    else:
        messages.info(request, f"New runs use agent profile version {version.version}; runs started keep theirs.")


def _save_what_the_page_changed(obj, form, change) -> list[str]:  # noqa: ANN001
    """Write the values the person changed on the page (all of them for a new row); return their names."""
    if not change:
        obj.save()
        return list(form.changed_data)
    changed = form.changed_on_the_page()
    if changed:
        obj.save(update_fields=changed)
    obj.refresh_from_db()
    return changed


class ApprovalPolicyForm(FollowsTheActiveVersion):
    editable = POLICY_FIELDS

    def clean(self) -> dict:
        cleaned = super().clean()
        # As a profile version's values are checked: no length of time a date cannot be counted with.
        for name, words in policy_time_problems(cleaned).items():
            self.add_error(name, words)
        return cleaned


class ToolApprovalRuleForm(FollowsTheActiveVersion):
    editable = ("tool_name", "requires_approval")

    def clean_tool_name(self) -> str:
        """A rule is for a tool the active version has: one for any other name (a typo: "Issue_Refund")
        was saved and reported as added, a version made, and the tool it meant went on unreviewed."""
        name = self.cleaned_data["tool_name"]
        profile = active_profile()
        tools = enabled_tools(profile)
        if name in tools or (self.instance.pk is not None and name == self.instance.tool_name):
            return name
        raise forms.ValidationError(
            f"No such tool in the active agent profile (version {profile.version}): {name!r}. "
            f"Its tools: {', '.join(sorted(tools))}."
        )


@admin.register(ApprovalPolicy)
class ApprovalPolicyAdmin(IdsChecked):
    form = ApprovalPolicyForm
    list_display = [
        "__str__",
        "refund_threshold_cents",
        "customer_limit_cents",
        "customer_window_days",
        "ttl_hours",
        "reminder_before_hours",
    ]

    readonly_fields = ["amounts_in"]

    @admin.display(description="currency")
    def amounts_in(self, policy: ApprovalPolicy) -> str:
        """The currency the amounts above are in: the active version's (``PolicyValues.currency``)."""
        profile = active_profile()
        values = policy_values(profile)
        return (
            f"Amounts are in {values.currency.upper()} (agent profile version {profile.version}), in its smallest "
            f"unit: the threshold is {format_money(values.refund_threshold_cents, values.currency)}, the customer "
            f"limit {format_money(values.customer_limit, values.currency)}. A refund in any other currency is "
            'reviewed by staff. The currency is changed in the version\'s approval policy ("currency").'
        )

    def has_add_permission(self, request) -> bool:  # noqa: ANN001
        return not ApprovalPolicy.objects.exists()

    def has_delete_permission(self, request, obj=None) -> bool:  # noqa: ANN001
        # The policy is edited (that makes the next profile version). Deleted, the row came back at the
        # next read with the model's defaults: the page showed values the active version does not have.
        return False

    def save_model(self, request, obj, form, change) -> None:  # noqa: ANN001
        changed = _save_what_the_page_changed(obj, form, change)
        # Only what this page changed: the rest stays as the active version has it.
        version = profile_follow_policy_tables(
            user=request.user, note="approval policy edited in the admin", policy_fields=changed
        )
        _tell_the_version(request, version)


@admin.register(ToolApprovalRule)
class ToolApprovalRuleAdmin(IdsChecked):
    form = ToolApprovalRuleForm
    list_display = ["tool_name", "requires_approval"]

    def save_model(self, request, obj, form, change) -> None:  # noqa: ANN001
        _save_what_the_page_changed(obj, form, change)
        version = profile_follow_policy_tables(
            user=request.user, note=f"approval rule for {obj.tool_name} edited", tools=[obj.tool_name]
        )
        _tell_the_version(request, version)

    def has_delete_permission(self, request, obj=None) -> bool:  # noqa: ANN001
        # A rule is turned off (requires approval unticked), which makes the next profile version; a
        # deleted row would leave the active version still asking for approvals the page no longer shows.
        return False


def _fields_with_amount() -> list[str]:
    """Every field of a request, the amount (cents and currency) shown once, as money."""
    names = [f.name for f in ApprovalRequest._meta.fields if f.name != "currency"]
    return ["amount" if name == "amount_cents" else name for name in names]


@admin.register(ApprovalRequest)
class ApprovalRequestAdmin(OfATicket, IdsChecked):
    list_display = ["id", "ticket", "tool_name", "amount", "status", "requested_at", "expires_at", "decided_by"]
    list_filter = ["status", "tool_name"]
    list_select_related = ["ticket", "decided_by"]
    search_fields = ["ticket__customer__email"]  # and a ticket's number (OfATicket)
    # Decisions go through approvals.services (the dashboard); here a request is read.
    fields = [*_fields_with_amount(), "other_refunds_on_order"]
    readonly_fields = fields

    @admin.display(description="amount", ordering="amount_cents")
    def amount(self, approval: ApprovalRequest) -> str:
        return approval.amount_display

    @admin.display(description="other refunds on the order")
    def other_refunds_on_order(self, approval: ApprovalRequest) -> str:
        """As the dashboard's card shows them, read now: paid, tried or asked for, in any ticket."""
        others = selectors.approval_other_refunds(approval)
        if not others:
            return "none"
        return format_html(
            "<ul>{}</ul>",
            format_html_join(
                "",
                '<li>{} · {} · {} · ticket <a href="{}">#{}</a></li>',
                (
                    (
                        r.amount,
                        r.status,
                        localize(timezone.localtime(r.at)),
                        reverse("staff:ticket", kwargs={"ticket_id": r.ticket_id}),
                        r.ticket_id,
                    )
                    for r in others
                ),
            ),
        )

    def has_add_permission(self, request) -> bool:  # noqa: ANN001
        return False

    def has_change_permission(self, request, obj=None) -> bool:  # noqa: ANN001
        # Read, never saved: a save writes the whole row back as it was read, and a decision made on the
        # dashboard in between (a "no") was put back to "pending", for a colleague to approve and pay.
        return False

    def has_delete_permission(self, request, obj=None) -> bool:  # noqa: ANN001
        return False


class ApprovalRequestInline(ReadOnlyInline):
    model = ApprovalRequest
    fields = ["id", "tool_name", "amount", "status", "requested_at", "decided_by", "decided_at", "note"]
    readonly_fields = fields
    show_change_link = True

    @admin.display(description="amount")
    def amount(self, approval: ApprovalRequest) -> str:
        return approval.amount_display


def _attach_to_ticket_admin() -> None:
    if ApprovalRequestInline not in TicketAdmin.inlines:
        TicketAdmin.inlines = [*TicketAdmin.inlines, ApprovalRequestInline]


_attach_to_ticket_admin()
