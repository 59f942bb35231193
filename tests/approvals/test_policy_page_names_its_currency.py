"""The approval policy page says which currency its amounts are in: the active agent profile version's.

The page asked for the threshold and the customer limit "in cents" and named no currency: in a
deployment whose version is in yen, 20000 is ¥20,000, and an operator setting "50000" for $500.00 set
¥50,000 (about $330). The currency is the version's, changed in the version's approval policy.
"""

from __future__ import annotations

import pytest

from agents.models import ApprovalPolicy
from agents.profiles import active_profile, profile_new_version

pytestmark = [pytest.mark.django_db]


def _page(admin_client) -> str:  # noqa: ANN001
    return admin_client.get(f"/admin/agents/approvalpolicy/{ApprovalPolicy.current().pk}/change/").content.decode()


def test_the_policy_page_names_the_active_versions_currency(admin_client):  # noqa: ANN001
    v1 = active_profile()
    assert "Amounts are in USD" in _page(admin_client)

    profile_new_version(changes={"approval_policy": {**v1.approval_policy, "currency": "jpy"}}, user=None)

    page = _page(admin_client)
    assert "Amounts are in JPY" in page and "¥20,000" in page, "the page named no currency for its amounts"
