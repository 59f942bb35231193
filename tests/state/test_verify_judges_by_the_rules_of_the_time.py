"""``verify_state`` judges a paid refund by the rules it was paid under.

A refund paid without review under its run's version ($150, under a $200 threshold) is not a
violation because the operator lowered the threshold to $100 afterwards: every later bundle of the
ticket, and ``verify_state --database`` after a move, still verify.
"""

from __future__ import annotations

import pytest

from agents.models import Refund, ToolCall
from agents.profiles import profile_new_version
from tests.state.conftest import export, verify
from tests.state.test_bundle import ask, customer_with_paid_order

pytestmark = [pytest.mark.django_db, pytest.mark.timeout(120)]


def test_a_refund_paid_under_the_rules_of_its_time_passes_verify_after_the_threshold_is_lowered(tmp_path, sandbox):
    customer, order = customer_with_paid_order(sandbox, "V-4004", 20000)
    ticket = ask(customer, "Please refund $150 on order V-4004")
    call = ToolCall.objects.get(ticket=ticket, name="issue_refund")
    assert not call.approval_required  # $150 is under the $200 threshold of the run's version
    assert Refund.objects.get(ticket=ticket).status == "succeeded"

    # Later, an operator makes refunds above $100 need a review (a new active profile version).
    profile_new_version(changes={"approval_policy": {"refund_threshold_cents": 10000}}, user=None)

    status, report = verify(export(tmp_path, ticket))
    assert status == 0, report
