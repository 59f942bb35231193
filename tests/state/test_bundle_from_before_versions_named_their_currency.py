"""A bundle written before profile versions named their policy's currency is the same versions here.

The upgrade gives every version here the currency it was read in (APPROVAL_POLICY_CURRENCY): a bundle
written before it carries the same versions without one. Compared as they were, each read as another
version: ``verify_state --database`` reported the database altered, and a restore into a deployment that
had made its own version 1 (every deployment does, on first use) was refused. A version naming no currency
is read in this deployment's (``policy_values``): it is the same version as one here naming that one.
"""

from __future__ import annotations

import pytest

from agents.models import AgentProfile, Refund
from agents.profiles import active_profile, policy_values
from tests.state.conftest import export, rewrite_part, verify
from tests.state.test_bundle import ask, customer_with_paid_order, empty_the_ledger, restore

pytestmark = [pytest.mark.django_db, pytest.mark.timeout(120)]


def _without_currency(rows: list[dict]) -> list[dict]:
    return [{**r, "approval_policy": {k: v for k, v in r["approval_policy"].items() if k != "currency"}} for r in rows]


def _bundle_from_before(tmp_path, sandbox):  # noqa: ANN001, ANN202
    empty_the_ledger()  # ids from 1, as a deployment's own version 1 has
    customer, _ = customer_with_paid_order(sandbox, "P-3001", 4999)
    ticket = ask(customer, "Please refund $30 on order P-3001")
    assert Refund.objects.get(ticket=ticket).status == "succeeded"
    path = export(tmp_path, ticket, include_personal_data=True)
    rewrite_part(path, "agents.AgentProfile", _without_currency)
    return path, ticket


def test_verify_against_the_upgraded_database_finds_nothing_altered(tmp_path, sandbox):  # noqa: ANN001
    path, _ = _bundle_from_before(tmp_path, sandbox)
    status, out = verify(path, database=True)
    assert status == 0, out


def test_a_restore_beside_the_deployments_own_version_1_is_not_refused(tmp_path, sandbox):  # noqa: ANN001
    path, ticket = _bundle_from_before(tmp_path, sandbox)
    empty_the_ledger()
    mine = active_profile()  # this deployment's own version 1, made on first use, naming its currency
    assert mine.version == 1 and mine.approval_policy["currency"] == "usd"

    restore(path)

    assert AgentProfile.objects.count() == 1
    assert policy_values(AgentProfile.objects.get(version=1)).currency == "usd"
    assert Refund.objects.filter(ticket_id=ticket.pk).count() == 1
