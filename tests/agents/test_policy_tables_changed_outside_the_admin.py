"""Approval rules tightened in the policy tables outside the admin (a shell, SQL, a data migration)
are what new runs decide by, as an edit on the admin's page is.

The admin's approval policy and tool rule pages make a new agent profile version when saved, and a
run keeps the version it started with. A change to the same rows made anywhere else made no
version, so every new run went on deciding by the rules the tables no longer showed: a threshold
lowered in a shell let refunds above it be paid without a staff approval. Now a new run that finds
the tables stricter than the active version first makes the next version with their stricter
values; runs already started keep theirs. A rule loosened behind the admin's back is not followed
(``tests/agents/test_profiles.py``).
"""

from __future__ import annotations

import pytest

from agents.models import AgentProfile, ApprovalPolicy, CallStatus, ToolApprovalRule
from agents.profiles import active_profile
from agents.runner import advance
from tests.agents.test_money_gates import Refunds, only_the_order_threshold, refund_calls
from tests.agents.test_money_path import assert_money_invariants, order_for, paid
from tests.conftest import make_customer
from tickets import services as ticket_services

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(120)]


def _first_version() -> AgentProfile:
    only_the_order_threshold()
    profile = active_profile()  # made from the tables as they are now (threshold $200)
    assert profile.approval_policy["refund_threshold_cents"] == 20000
    return profile


def test_a_threshold_lowered_in_a_shell_holds_the_next_refund_above_it_for_staff(sandbox):  # noqa: ANN001
    first = _first_version()
    ApprovalPolicy.objects.filter(pk=ApprovalPolicy.current().pk).update(refund_threshold_cents=1000)  # $10
    customer = make_customer()
    order = order_for(customer, "PT-1001", 5000, sandbox)
    ticket, _ = ticket_services.ticket_open(customer=customer, subject="Refund", body="Refund PT-1001")

    advance(ticket.pk, model=Refunds(("PT-1001", 5000)))

    (call,) = refund_calls(ticket)
    assert paid(sandbox, order) == [], "a $50 refund was paid unreviewed with the threshold set to $10"
    assert call.status == CallStatus.AWAITING_APPROVAL and "$10.00" in call.approval_reason, call.approval_reason
    now = active_profile()
    assert now.version == first.version + 1 and now.approval_policy["refund_threshold_cents"] == 1000
    assert call.run.profile_id == now.pk
    assert_money_invariants(sandbox, needed_approval={"PT-1001"})


def test_a_threshold_raised_in_a_shell_is_not_followed(sandbox):  # noqa: ANN001
    """Loosening a rule is a version made in the admin, where it is seen and shown with its diff."""
    first = _first_version()
    ApprovalPolicy.objects.filter(pk=ApprovalPolicy.current().pk).update(refund_threshold_cents=100000)  # $1,000
    customer = make_customer()
    order = order_for(customer, "PT-2001", 50000, sandbox)
    ticket, _ = ticket_services.ticket_open(customer=customer, subject="Refund", body="Refund PT-2001")

    advance(ticket.pk, model=Refunds(("PT-2001", 50000)))

    (call,) = refund_calls(ticket)
    assert call.status == CallStatus.AWAITING_APPROVAL and "$200.00" in call.approval_reason, call.approval_reason
    assert paid(sandbox, order) == []
    assert active_profile().version == first.version


def test_a_tool_rule_set_in_a_shell_holds_the_next_call_for_staff(sandbox):  # noqa: ANN001
    _first_version()
    ToolApprovalRule.objects.update_or_create(tool_name="issue_refund", defaults={"requires_approval": True})
    customer = make_customer()
    order = order_for(customer, "PT-3001", 1000, sandbox)
    ticket, _ = ticket_services.ticket_open(customer=customer, subject="Refund", body="Refund PT-3001")

    advance(ticket.pk, model=Refunds(("PT-3001", 1000)))

    (call,) = refund_calls(ticket)
    assert paid(sandbox, order) == []
    assert call.status == CallStatus.AWAITING_APPROVAL
    assert call.approval_reason == "every issue_refund call needs a staff approval"


def test_tables_that_say_what_the_active_version_says_make_no_version(sandbox):  # noqa: ANN001
    first = _first_version()
    customer = make_customer()
    order_for(customer, "PT-4001", 1000, sandbox)
    for n in range(2):
        ticket, _ = ticket_services.ticket_open(customer=customer, subject="Order", body=f"Question {n}")
        advance(ticket.pk)
    assert list(AgentProfile.objects.values_list("version", flat=True)) == [first.version]
