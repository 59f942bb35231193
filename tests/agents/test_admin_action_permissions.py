"""Admin actions that change what the agent runs under are for staff who may change it.

The "Support staff" group has read-only access to the ledger in the admin: it is not offered, and
cannot post, "Move paused runs to the active profile version" (needs agents.change_agentrun) or
"Make this version active" (needs agents.change_agentprofile).
"""

from __future__ import annotations

import pytest
from django.test import Client

from agents.models import AgentRun, RunStatus
from agents.profiles import profile_new_version
from agents.runner import advance
from tests.approvals.test_approvals import refund_ticket
from tests.staff.conftest import make_support_staff

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(120)]


def test_a_read_only_support_staff_member_cannot_move_a_paused_run_to_another_profile_version(sandbox):  # noqa: ANN001
    paused, _ = refund_ticket(sandbox, flagged=True, number="Q-1301")
    advance(paused.pk)
    run = AgentRun.objects.get(ticket=paused)
    assert run.status == RunStatus.WAITING_APPROVAL and run.profile.version == 1
    profile_new_version(changes={"system_prompt": "Another prompt."}, user=None)

    viewer = make_support_staff("viewer")  # the group: view_agentrun, no change_agentrun
    assert viewer.has_perm("agents.view_agentrun") and not viewer.has_perm("agents.change_agentrun")
    client = Client()
    client.force_login(viewer)
    page = client.get("/admin/agents/agentrun/").content.decode()
    assert "move_runs_to_active" not in page
    client.post("/admin/agents/agentrun/", {"action": "move_runs_to_active", "_selected_action": [str(run.pk)]})

    run.refresh_from_db()
    assert run.profile.version == 1, "a view-only staff member moved a paused run to another profile version"
    assert not paused.events.filter(kind="agent_profile_changed").exists()


def test_a_staff_member_who_may_only_view_profiles_cannot_make_a_version_active(db):  # noqa: ANN001
    from django.contrib.auth import get_user_model
    from django.contrib.auth.models import Permission

    from agents.models import AgentProfile
    from agents.profiles import active_profile

    first = active_profile()
    second = profile_new_version(changes={"system_prompt": "Second."}, user=None, activate=False)
    assert AgentProfile.objects.get(pk=first.pk).is_active and not second.is_active
    viewer = get_user_model().objects.create_user(username="profile-viewer", password="x", is_staff=True)
    viewer.user_permissions.add(Permission.objects.get(codename="view_agentprofile"))
    client = Client()
    client.force_login(viewer)

    client.post("/admin/agents/agentprofile/", {"action": "activate_profile", "_selected_action": [str(second.pk)]})

    assert AgentProfile.objects.get(pk=first.pk).is_active, "a view-only user changed the active agent profile"
    assert not AgentProfile.objects.get(pk=second.pk).is_active
