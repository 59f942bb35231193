"""A bundle whose waiting refund in another currency than its version's policy reads as needing no
approval is refused, as one above the threshold is.

``verify`` and ``restore`` judged a call's rules by its amount alone: 150.00 € waiting for staff (every
refund in another currency than the policy's dollars is reviewed), edited to read as one recorded to run
unreviewed, was under the threshold's number (20000), passed both, and the new deployment's agent paid it.
"""

from __future__ import annotations

import pytest

from agents.models import RunStatus
from agents.profiles import active_profile
from agents.runner import advance
from state.verify import active_profile_rules
from tests.agents.test_policy_currency import _order
from tests.conftest import make_customer
from tests.state.conftest import export, rewrite_part, verify
from tests.state.test_bundle import edited_bundle_pays_nothing
from tests.state.test_verify_refuses_a_waiting_refund_that_reads_unreviewed import _running, _unreviewed, _withdrawn
from tickets import services as ticket_services

pytestmark = [pytest.mark.django_db, pytest.mark.timeout(120)]


def test_a_euro_refund_under_the_thresholds_number_edited_to_run_unreviewed_is_refused(tmp_path, sandbox):  # noqa: ANN001
    customer = make_customer()
    _order(customer, "Q-7711", 15000, "eur", sandbox)
    ticket, _ = ticket_services.ticket_open(customer=customer, subject="Refund", body="Please refund order Q-7711")
    assert advance(ticket.pk).state == RunStatus.WAITING_APPROVAL
    path = export(tmp_path, ticket, include_personal_data=True)
    assert verify(path)[0] == 0
    rewrite_part(path, "agents.ToolCall", _unreviewed)
    rewrite_part(path, "agents.AgentRun", _running)
    rewrite_part(path, "approvals.ApprovalRequest", _withdrawn)

    edited_bundle_pays_nothing(
        path,
        ticket,
        refused_for="approval",
        verify_says="no call still to run reads as needing no approval its rules ask",
        edited="150.00 € refund waiting for staff (a policy in dollars) was edited to run unreviewed",
    )


def test_the_rules_a_restore_makes_active_are_said_in_their_versions_currency():
    yen = {"version": 3, "approval_policy": {"refund_threshold_cents": 20000, "currency": "jpy"}, "tools": []}
    assert "refunds above ¥20,000 per order" in active_profile_rules(yen)


def test_the_bundles_report_says_the_policys_amounts_in_its_versions_currency(tmp_path, settings):  # noqa: ANN001
    settings.APPROVAL_POLICY_CURRENCY = "jpy"
    active_profile()  # the first version, in yen; the policy page's tables follow it
    ticket, _ = ticket_services.ticket_open(customer=make_customer(), subject="Hello", body="Where is my order?")

    status, report = verify(export(tmp_path, ticket))

    assert status == 0, report
    line = next(line for line in report.splitlines() if "approval policy: refunds above" in line)
    assert "¥20,000 per order" in line, line
