"""The approval policy's currency is part of the version a run is pinned to.

A run decides with the thresholds of its profile version, but the currency they are in was read from
APPROVAL_POLICY_CURRENCY when each refund was decided. A redeploy that set it from usd to eur while a run
was paused made the run read its $200.00 threshold as 200.00 €: a refund of 150.00 € on an order paid in
euros, reviewed under the rules the run started with (another currency than the policy's), was paid
without one. The sandbox (a separate process, over HTTP) shows what was paid.
"""

from __future__ import annotations

import importlib
import json

import pytest

from agents.llm import ModelResponse, ToolCallRequest
from agents.models import AgentProfile, AgentRun, CallStatus, RunStatus, ToolCall
from agents.profiles import (
    active_profile,
    approval_policy_cleaned,
    content_problems,
    policy_values,
    profile_new_version,
)
from agents.runner import advance
from approvals import services as approval_services
from approvals.models import ApprovalRequest
from tests.agents.test_money_gates import only_the_order_threshold
from tests.agents.test_money_path import paid
from tests.agents.test_policy_currency import _order
from tests.approvals.conftest import make_staff
from tests.conftest import make_customer
from tickets import services as ticket_services

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.timeout(180),
    pytest.mark.usefixtures("quick_provider_retries"),
]


class OneRefundAStep:
    """A model that asks for the refunds given ((order number, cents), ...), one a step, then says it is done."""

    name = "one-refund-a-step"

    def __init__(self, *wanted: tuple[str, int]) -> None:
        self.wanted = wanted

    def complete(self, *, messages, tools, on_token=None):  # noqa: ANN001
        done = sum(1 for m in messages if m["role"] == "tool")
        if done >= len(self.wanted):
            return ModelResponse(text="Done.")
        number, cents = self.wanted[done]
        arguments = json.dumps({"order_number": number, "amount_cents": cents})
        return ModelResponse(text="", tool_calls=[ToolCallRequest(f"c{done + 1}", "issue_refund", arguments)])


def test_a_paused_run_keeps_its_versions_currency_across_a_redeploy(sandbox, settings):  # noqa: ANN001
    settings.REFUND_CUSTOMER_CONFIRMATION = False
    only_the_order_threshold()
    v1 = active_profile()  # made while the deployment's policy is in dollars
    customer = make_customer()
    dollars = _order(customer, "U-1001", 30000, "usd", sandbox)
    euros = _order(customer, "E-1001", 15000, "eur", sandbox)
    model = OneRefundAStep(("U-1001", 30000), ("E-1001", 15000))
    ticket, _ = ticket_services.ticket_open(customer=customer, subject="Refunds", body="Refund both orders")
    advance(ticket.pk, model=model)
    run = AgentRun.objects.get(ticket=ticket)
    assert run.status == RunStatus.WAITING_APPROVAL and run.profile == v1

    settings.APPROVAL_POLICY_CURRENCY = "eur"  # redeployed while the run waited
    approval_services.approval_decide(
        approval_id=ApprovalRequest.objects.get(ticket=ticket).pk,
        user=make_staff("pin-approver", can_decide=True),
        approve=True,
    )
    advance(ticket.pk, model=model)

    assert len(paid(sandbox, dollars)) == 1
    second = ToolCall.objects.get(ticket=ticket, arguments__order_number="E-1001")
    assert paid(sandbox, euros) == [], "a euro refund the run's version has reviewed was paid without an approval"
    assert second.approval_required and second.status == CallStatus.AWAITING_APPROVAL
    assert "refunds in EUR are reviewed by staff" in second.approval_reason
    assert "amounts are in USD" in second.approval_reason


def test_a_new_run_on_a_version_made_before_the_redeploy_keeps_its_currency(sandbox, settings):  # noqa: ANN001
    only_the_order_threshold()
    active_profile()
    settings.APPROVAL_POLICY_CURRENCY = "eur"
    customer = make_customer()
    euros = _order(customer, "E-2001", 15000, "eur", sandbox)
    ticket, _ = ticket_services.ticket_open(customer=customer, subject="Refund", body="Refund E-2001")
    advance(ticket.pk, model=OneRefundAStep(("E-2001", 15000)))

    call = ToolCall.objects.get(ticket=ticket)
    assert call.approval_required, "the version's dollar threshold was read as euros"
    assert paid(sandbox, euros) == []


def test_each_version_names_its_currency_and_a_version_naming_none_takes_the_settings(settings):  # noqa: ANN001
    v1 = active_profile()
    assert v1.approval_policy["currency"] == "usd"
    settings.APPROVAL_POLICY_CURRENCY = "eur"
    copied = profile_new_version(changes={"system_prompt": "Be brief."}, user=None)
    assert policy_values(copied).currency == "usd", "a version copied from another keeps that one's currency"
    unnamed = {k: v for k, v in v1.approval_policy.items() if k != "currency"}
    fresh = profile_new_version(changes={"approval_policy": unnamed}, user=None)
    assert fresh.approval_policy["currency"] == "eur"
    settings.APPROVAL_POLICY_CURRENCY = "gbp"
    assert policy_values(fresh).currency == "eur", "read from the version, not the setting"


def test_the_versions_made_before_are_given_the_currency_they_were_read_in(settings):  # noqa: ANN001
    from django.apps import apps

    migration = importlib.import_module("agents.migrations.0020_profile_policy_names_its_currency")
    old = AgentProfile.objects.create(version=7, approval_policy={"refund_threshold_cents": 20000})
    named = AgentProfile.objects.create(version=8, approval_policy={"refund_threshold_cents": 100, "currency": "jpy"})
    settings.APPROVAL_POLICY_CURRENCY = "sek"

    migration.name_the_currency(apps, None)

    old.refresh_from_db()
    named.refresh_from_db()
    assert old.approval_policy == {"refund_threshold_cents": 20000, "currency": "sek"}
    assert named.approval_policy["currency"] == "jpy"
    settings.APPROVAL_POLICY_CURRENCY = "usd"
    assert policy_values(old).currency == "sek"


def test_a_versions_currency_is_a_three_letter_code_kept_in_lower_case():
    assert approval_policy_cleaned({"currency": "EUR"}) == ({"currency": "eur"}, [])
    for wrong in ("dollars", "", 840, None, "e1r"):
        cleaned, problems = approval_policy_cleaned({"currency": wrong})
        assert cleaned == {} and problems == [
            f"currency: {wrong!r} is not a three-letter ISO currency code such as usd or eur"
        ], problems
    content = {"model": "offline", "tools": [], "model_parameters": {}, "approval_policy": {"currency": "EUR"}}
    assert content_problems(content) == ["approval_policy: currency: 'EUR' is not stored as the policy's value ('eur')"]
