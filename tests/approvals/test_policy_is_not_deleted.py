"""The approval policy's row cannot be deleted from the admin (its page, the list's "Delete selected"),
by anyone, a superuser too. Deleted, it came back at the next read with the model's defaults (a
threshold of $200.00 where the active profile version says $1.00): the policy page then showed
values the agent does not run with, and no profile version said anything had changed. It is edited,
which makes the next version, as a tool's rule is turned off rather than deleted.
"""

from __future__ import annotations

import pytest

from agents.models import ApprovalPolicy
from agents.profiles import active_profile, profile_new_version

pytestmark = pytest.mark.django_db


def test_the_approval_policy_is_edited_not_deleted(admin_client):
    policy = active_profile().approval_policy
    profile_new_version(changes={"approval_policy": {**policy, "refund_threshold_cents": 100}}, user=None)
    row = ApprovalPolicy.current()
    assert row.refund_threshold_cents == 100

    page = admin_client.post(f"/admin/agents/approvalpolicy/{row.pk}/delete/", {"post": "yes"})
    listed = admin_client.post(
        "/admin/agents/approvalpolicy/", {"action": "delete_selected", "_selected_action": [row.pk], "post": "yes"}
    )
    listing = admin_client.get("/admin/agents/approvalpolicy/").content.decode()

    assert ApprovalPolicy.objects.filter(pk=row.pk, refund_threshold_cents=100).exists()
    assert page.status_code == 403
    assert listed.status_code in {200, 302}  # no such action offered: the list again, nothing deleted
    assert "delete_selected" not in listing
