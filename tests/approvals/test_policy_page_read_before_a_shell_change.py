"""A rule tightened in the policy tables outside the admin (a shell, SQL, a data migration) is not put
back by the admin's approval policy page opened before it.

The page posts every value it showed. Saved after a data migration lowered the threshold, it wrote the
old threshold back (Django counts a value that differs from the row as changed) and made a version of
it, with only the reminder hours edited on it: the lowered threshold was gone before any run could
follow it, and a refund above it was paid unreviewed. A save writes what the person changed on the
page; a value they changed that someone else changed since the page was read is refused.
"""

from __future__ import annotations

import pytest

from agents.models import ApprovalPolicy, CallStatus, ToolApprovalRule
from agents.profiles import active_profile
from agents.runner import advance
from tests.agents.test_money_gates import Refunds, only_the_order_threshold, refund_calls
from tests.agents.test_money_path import order_for, paid
from tests.approvals.test_policy_page_keeps_profile_rules import (
    edit_reminder_hours_in_admin,
    policy_page,
    save_profile_in_admin,
)
from tests.conftest import make_customer
from tickets import services as ticket_services

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(120)]


def _lowered_in_a_shell(cents: int) -> None:
    ApprovalPolicy.objects.filter(pk=ApprovalPolicy.current().pk).update(refund_threshold_cents=cents)


def test_a_policy_page_read_before_a_threshold_was_lowered_elsewhere_does_not_put_it_back(sandbox, admin_client):  # noqa: ANN001
    only_the_order_threshold()
    assert active_profile().approval_policy["refund_threshold_cents"] == 20000
    shown = policy_page(admin_client)  # an operator opens the page: $200.00
    _lowered_in_a_shell(1000)  # a data migration lowers it to $10.00 meanwhile

    saved = edit_reminder_hours_in_admin(admin_client, shown)  # they change only the reminder hours

    assert saved.status_code == 302, saved.content.decode()[:2000]
    policy = ApprovalPolicy.current()
    assert policy.reminder_before_hours == 6
    assert policy.refund_threshold_cents == 1000, "the page put back the threshold it showed"
    customer = make_customer()
    order = order_for(customer, "PS-1001", 5000, sandbox)
    ticket, _ = ticket_services.ticket_open(customer=customer, subject="Refund", body="Refund PS-1001")
    advance(ticket.pk, model=Refunds(("PS-1001", 5000)))
    (call,) = refund_calls(ticket)
    assert call.status == CallStatus.AWAITING_APPROVAL and "$10.00" in call.approval_reason, call.approval_reason
    assert paid(sandbox, order) == []


def test_a_value_changed_on_the_page_and_elsewhere_since_it_was_read_is_refused(sandbox, admin_client):  # noqa: ANN001
    only_the_order_threshold()
    shown = policy_page(admin_client)
    _lowered_in_a_shell(1000)

    response = admin_client.post(
        f"/admin/agents/approvalpolicy/{ApprovalPolicy.current().pk}/change/",
        {**shown, "refund_threshold_cents": 15000},
    )

    assert response.status_code == 200 and "changed by someone else" in response.content.decode()
    assert ApprovalPolicy.current().refund_threshold_cents == 1000


@pytest.mark.parametrize("how", ["profile_page_saved", "version_made_active"])
def test_a_threshold_lowered_elsewhere_is_not_undone_by_a_version_saved_or_made_active(sandbox, admin_client, how):  # noqa: ANN001
    """A version saved on the profile page (its prompt edited) or made active with the list's action makes
    the tables follow it; a threshold lowered in the tables that no run had followed yet was written over."""
    only_the_order_threshold()
    first = active_profile()
    assert first.approval_policy["refund_threshold_cents"] == 20000
    _lowered_in_a_shell(1000)

    if how == "profile_page_saved":
        save_profile_in_admin(admin_client)
    else:
        response = admin_client.post(
            "/admin/agents/agentprofile/", {"action": "activate_profile", "_selected_action": [first.pk]}
        )
        assert response.status_code == 302

    customer = make_customer()
    order = order_for(customer, "PS-2001", 5000, sandbox)
    ticket, _ = ticket_services.ticket_open(customer=customer, subject="Refund", body="Refund PS-2001")
    advance(ticket.pk, model=Refunds(("PS-2001", 5000)))
    (call,) = refund_calls(ticket)
    assert call.status == CallStatus.AWAITING_APPROVAL and "$10.00" in call.approval_reason, call.approval_reason
    assert paid(sandbox, order) == []


def test_a_tool_rule_page_read_before_the_rule_was_set_elsewhere_does_not_unset_it(sandbox, admin_client):  # noqa: ANN001
    only_the_order_threshold()
    rule = ToolApprovalRule.objects.create(tool_name="issue_refund", requires_approval=False)
    active_profile()
    page = admin_client.get(f"/admin/agents/toolapprovalrule/{rule.pk}/change/")
    form = page.context["adminform"].form
    shown = {name: form[name].value() for name in form.fields if form[name].value() not in (None, False)}
    ToolApprovalRule.objects.filter(pk=rule.pk).update(requires_approval=True)  # set in a shell meanwhile

    saved = admin_client.post(f"/admin/agents/toolapprovalrule/{rule.pk}/change/", shown)  # Save, unchanged

    assert saved.status_code == 302, saved.content.decode()[:2000]
    assert ToolApprovalRule.objects.get(pk=rule.pk).requires_approval
    customer = make_customer()
    order = order_for(customer, "PS-3001", 1000, sandbox)
    ticket, _ = ticket_services.ticket_open(customer=customer, subject="Refund", body="Refund PS-3001")
    advance(ticket.pk, model=Refunds(("PS-3001", 1000)))
    (call,) = refund_calls(ticket)
    assert call.status == CallStatus.AWAITING_APPROVAL
    assert paid(sandbox, order) == []
