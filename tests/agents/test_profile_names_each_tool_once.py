"""An agent profile version lists each tool once. The admin's form took a tool listed twice with two
approval rules ("issue_refund" needing a staff approval, and not): the version made every refund
wait for staff, while the tool rule page (which followed the last entry) said refunds need none."""

from __future__ import annotations

import pytest

from agents.models import ToolApprovalRule
from agents.profiles import active_profile
from tests.agents.test_profile_form_checks_values import _save_tools_in_the_admin

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(120)]


def test_a_tool_listed_twice_is_a_form_error_and_makes_no_version(admin_client):  # noqa: ANN001
    before = active_profile()
    tools = [
        *before.tools,
        {"name": "issue_refund", "requires_approval": True},
        {"name": "issue_refund", "requires_approval": False},
    ]

    response = _save_tools_in_the_admin(admin_client, tools)

    assert response.status_code == 200  # the form again, with the reason
    assert "listed more than once: issue_refund" in response.content.decode()
    assert active_profile().pk == before.pk
    assert not ToolApprovalRule.objects.filter(tool_name="issue_refund", requires_approval=False).exists()


def test_each_tool_listed_once_is_saved(admin_client):  # noqa: ANN001
    tools = [{**t, "requires_approval": t["name"] == "issue_refund"} for t in active_profile().tools]

    assert _save_tools_in_the_admin(admin_client, tools).status_code == 302

    assert {t["name"] for t in active_profile().tools if t["requires_approval"]} == {"issue_refund"}
    assert ToolApprovalRule.objects.get(tool_name="issue_refund").requires_approval
