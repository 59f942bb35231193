"""A tool approval rule is a rule for one tool the agent has. Its admin page took any name: a rule for
"Issue_Refund" (a typo) was saved, reported as added, and a new profile version made, while refunds
went on without a staff approval. A name the active agent profile version has no tool by is refused."""

from __future__ import annotations

import pytest

from agents.models import ToolApprovalRule
from agents.profiles import active_profile
from agents.tools import REGISTRY

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(120)]


def form_of(admin_client, url: str) -> dict:  # noqa: ANN001
    """The page's form, as the browser posts it back."""
    form = admin_client.get(url).context["adminform"].form
    data = {name: form[name].value() for name in form.fields if form[name].value() is not None}
    data["requires_approval"] = "on" if data.get("requires_approval") else ""
    return data


@pytest.mark.parametrize("name", ["Issue_Refund", "refund", "issue_refunds"])
def test_a_rule_for_a_tool_the_agent_does_not_have_is_refused_and_makes_no_version(admin_client, name):  # noqa: ANN001
    before = active_profile().version
    data = {
        **form_of(admin_client, "/admin/agents/toolapprovalrule/add/"),
        "tool_name": name,
        "requires_approval": "on",
    }

    page = admin_client.post("/admin/agents/toolapprovalrule/add/", data)

    assert page.status_code == 200
    assert "No such tool" in page.content.decode() and "issue_refund" in page.content.decode()
    assert not ToolApprovalRule.objects.filter(tool_name=name).exists()
    assert active_profile().version == before


def test_a_rule_for_a_tool_the_agent_has_is_added(admin_client):  # noqa: ANN001
    assert "issue_refund" in REGISTRY
    data = form_of(admin_client, "/admin/agents/toolapprovalrule/add/")

    page = admin_client.post("/admin/agents/toolapprovalrule/add/", {**data, "tool_name": "issue_refund"})

    assert page.status_code == 302
    assert {t["name"]: t["requires_approval"] for t in active_profile().tools}["issue_refund"]
