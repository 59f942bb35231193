"""A deployment moved to a new database keeps the approval rules in force where it came from.

A bundle carries the profile versions its runs are pinned to and, in its manifest, the version that
was active. Restored into a deployment with no active version (a new one), that version becomes
active: a threshold the operator lowered stays lowered, rather than the newest restored version's.
"""

from __future__ import annotations

import pytest

from agents.models import AgentProfile, AgentRun, ApprovalPolicy, Refund, RunStatus
from agents.profiles import active_profile, profile_new_version
from agents.runner import advance
from tests.state.conftest import export, paused_ticket
from tests.state.test_bundle import ask, customer_with_paid_order, empty_the_ledger, restore
from tickets import services as ticket_services

pytestmark = [pytest.mark.django_db, pytest.mark.timeout(120)]


def test_moving_a_deployment_keeps_the_approval_threshold_in_force(tmp_path, sandbox):
    empty_the_ledger()  # the deployment from its start: its profile ids begin at 1, as a new one's do
    customer, _ = customer_with_paid_order(sandbox, "P-1001", 4999)
    ticket = ask(customer, "Where is my order P-1001?")  # a run pinned to version 1 ($200 threshold)
    # The operator then makes refunds above $100 need a staff review: version 2, active.
    profile_new_version(changes={"approval_policy": {"refund_threshold_cents": 10000}}, user=None)
    assert ApprovalPolicy.current().refund_threshold_cents == 10000
    path = export(tmp_path, ticket, include_personal_data=True)

    empty_the_ledger()  # the new deployment, migrated, nothing used yet
    restore(path)

    assert ApprovalPolicy.current().refund_threshold_cents == 10000, "the policy in force was not carried"
    # A customer of the new deployment asks for $150 back: above the $100 in force, so a person reviews it.
    newcomer, order = customer_with_paid_order(sandbox, "P-2002", 20000)
    fresh, _ = ticket_services.ticket_open(
        customer=newcomer, subject="Refund", body="Please refund $150 on order P-2002"
    )
    state = advance(fresh.pk).state
    assert state == RunStatus.WAITING_APPROVAL, (
        f"paid unreviewed on profile v{active_profile().version} "
        f"(threshold {ApprovalPolicy.current().refund_threshold_cents}); refunds: "
        f"{list(Refund.objects.filter(ticket=fresh).values_list('status', 'amount_cents'))}"
    )
    assert not [r for r in sandbox.refunds() if r["payment_intent"] == order.payment_reference]


def test_a_run_started_before_the_profile_changed_restores_into_a_new_deployment(tmp_path):
    """What broke: a ticket whose run is pinned to version 1, exported after version 2 was made active,
    could not be restored into a new database ("duplicate key ... agents_agentprofile_pkey"): the restore
    made version 2 before moving the id sequences past the restored version 1, so it took id 1 again."""
    empty_the_ledger()  # the deployment from its start: version 1 is id 1
    ticket, _ = paused_ticket()
    profile_new_version(changes={"system_prompt": "Version two."}, user=None)
    path = export(tmp_path, ticket, include_personal_data=True)

    empty_the_ledger()  # the new deployment, migrated, nothing used yet
    restore(path)

    assert AgentRun.objects.get(ticket_id=ticket.pk).profile.version == 1
    assert AgentProfile.objects.get(is_active=True).version == 2
    assert AgentProfile.objects.get(is_active=True).system_prompt == "Version two."
