"""Editing one value on the admin's approval policy or tool rule pages changes that value only.

The rules new runs use live on the active agent profile version; the admin's ApprovalPolicy and
ToolApprovalRule pages show them and make the next version from what was edited there. A stricter
rule set on the profile itself (a lower threshold, a tool that always needs approval) is not undone
by an unrelated edit on those pages, and a page read before another version became active is
refused rather than saved over it.
"""

from __future__ import annotations

import json

import pytest

from agents.models import ApprovalPolicy, CallStatus, ToolApprovalRule, ToolCall
from agents.profiles import active_profile
from agents.runner import advance
from approvals.models import ApprovalRequest
from tests.approvals.test_approvals import provider_refunds, refund_ticket

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(120)]


def save_profile_in_admin(admin_client, *, tools=None, approval_policy=None) -> None:  # noqa: ANN001
    """Open the active version in the admin and save it with these changes (makes the next version, active)."""
    v = active_profile()
    data = {
        "system_prompt": v.system_prompt,
        "model": v.model,
        "model_parameters": json.dumps(v.model_parameters),
        "tools": json.dumps(tools if tools is not None else v.tools),
        "approval_policy": json.dumps(approval_policy if approval_policy is not None else v.approval_policy),
        "note": "stricter refunds",
        "make_active": "on",
    }
    response = admin_client.post(f"/admin/agents/agentprofile/{v.pk}/change/", data)
    assert response.status_code == 302, response.content.decode()[:2000]


def policy_page(admin_client) -> dict:  # noqa: ANN001
    """The approval policy page's form, as the browser would post it back."""
    policy = ApprovalPolicy.current()
    page = admin_client.get(f"/admin/agents/approvalpolicy/{policy.pk}/change/")
    form = page.context["adminform"].form
    data = {name: form[name].value() if form[name].value() is not None else "" for name in form.fields}
    data["customer_confirms_refunds"] = "on" if data.get("customer_confirms_refunds") else ""
    return data


def edit_reminder_hours_in_admin(admin_client, data=None):  # noqa: ANN001, ANN201
    """Someone changes only when staff are reminded, on the approval policy page."""
    data = {**(data or policy_page(admin_client)), "reminder_before_hours": 6}
    return admin_client.post(f"/admin/agents/approvalpolicy/{ApprovalPolicy.current().pk}/change/", data)


@pytest.mark.parametrize("stricter", ["threshold_lowered_to_10_dollars", "issue_refund_always_approved"])
def test_an_unrelated_policy_page_edit_does_not_undo_a_stricter_rule_set_on_the_profile(
    sandbox,
    admin_client,
    stricter,  # noqa: ANN001
):
    v1 = active_profile()
    if stricter == "threshold_lowered_to_10_dollars":
        save_profile_in_admin(admin_client, approval_policy={**v1.approval_policy, "refund_threshold_cents": 1000})
    else:
        tools = [{**t, "requires_approval": t["name"] == "issue_refund" or t["requires_approval"]} for t in v1.tools]
        save_profile_in_admin(admin_client, tools=tools)

    assert edit_reminder_hours_in_admin(admin_client).status_code == 302  # nothing about refunds meant to change
    assert active_profile().approval_policy["reminder_before_hours"] == 6

    ticket, order = refund_ticket(sandbox, total_cents=4999, number="R-1101")  # $49.99: above $10
    advance(ticket.pk)

    call = ToolCall.objects.get(ticket=ticket, name="issue_refund")
    assert provider_refunds(sandbox, order) == [], "paid without the staff approval the profile asked for"
    assert call.status == CallStatus.AWAITING_APPROVAL
    assert ApprovalRequest.objects.filter(tool_call=call, status="pending").exists()


def test_a_policy_page_read_before_another_version_became_active_is_refused(admin_client):  # noqa: ANN001
    stale = policy_page(admin_client)  # threshold $200 on the page
    v1 = active_profile()
    save_profile_in_admin(admin_client, approval_policy={**v1.approval_policy, "refund_threshold_cents": 1000})
    made = active_profile()

    response = edit_reminder_hours_in_admin(admin_client, stale)

    assert response.status_code == 200 and "The agent profile changed since this page was opened" in (
        response.content.decode()
    )
    assert active_profile().version == made.version
    assert active_profile().approval_policy["refund_threshold_cents"] == 1000
    assert ApprovalPolicy.current().refund_threshold_cents == 1000  # the page now shows the active rules


def test_a_tool_rule_edit_changes_that_tool_only(admin_client):  # noqa: ANN001
    v1 = active_profile()
    tools = [{**t, "requires_approval": t["name"] == "issue_refund" or t["requires_approval"]} for t in v1.tools]
    save_profile_in_admin(admin_client, tools=tools)
    rule = ToolApprovalRule.objects.get(tool_name="issue_refund")  # the page shows the profile's rule
    assert rule.requires_approval
    page = admin_client.get("/admin/agents/toolapprovalrule/add/").context["adminform"].form
    added = {
        "tool_name": "notify_customer_by_email",
        "requires_approval": "on",
        "profile_version": page["profile_version"].value(),
    }

    assert admin_client.post("/admin/agents/toolapprovalrule/add/", added).status_code == 302

    rules = {t["name"]: t["requires_approval"] for t in active_profile().tools}
    assert rules["issue_refund"] and rules["notify_customer_by_email"]


def test_a_tool_rule_is_turned_off_not_deleted(admin_client):  # noqa: ANN001
    """Deleting a rule made no profile version: the active one still asked for approvals the page no
    longer showed. A rule is turned off instead (that makes the next version)."""
    v1 = active_profile()
    save_profile_in_admin(
        admin_client,
        tools=[{**t, "requires_approval": t["name"] == "issue_refund" or t["requires_approval"]} for t in v1.tools],
    )
    rule = ToolApprovalRule.objects.get(tool_name="issue_refund")

    assert admin_client.get(f"/admin/agents/toolapprovalrule/{rule.pk}/delete/").status_code == 403
    listing = admin_client.post(
        "/admin/agents/toolapprovalrule/", {"action": "delete_selected", "_selected_action": [rule.pk]}
    )
    assert listing.status_code in {200, 302}  # no such action offered: the page again, nothing deleted
    assert ToolApprovalRule.objects.filter(pk=rule.pk).exists()
    assert {t["name"]: t["requires_approval"] for t in active_profile().tools}["issue_refund"]
