"""A member of staff who may add agent profile versions but not change them (draft a prompt for review)
saves a draft; it is not made active.

The version list offers "Make this version active" only to staff who may change profiles (README: only
they see the actions that make a version active). The add page's "make active" box, ticked by default,
was offered to anyone who could add a version, and saving made the draft the version every new run
starts with.
"""

from __future__ import annotations

import json

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from django.test import Client

from agents.models import AgentProfile
from agents.profiles import active_profile

pytestmark = pytest.mark.django_db(transaction=True)


def _staff_with(*codenames: str) -> Client:
    user = get_user_model().objects.create_user(username="drafter", password="pw-123456789", is_staff=True)
    user.user_permissions.add(*Permission.objects.filter(content_type__app_label="agents", codename__in=codenames))
    client = Client()
    client.force_login(user)
    return client


def _add_a_version(client: Client) -> int:
    v1 = active_profile()
    page = client.get("/admin/agents/agentprofile/add/")
    assert page.status_code == 200
    form = page.context["adminform"].form
    data = {
        "system_prompt": "A draft prompt, for review.",
        "model": v1.model,
        "model_parameters": json.dumps(v1.model_parameters or {}),
        "tools": json.dumps(v1.tools),
        "approval_policy": json.dumps(v1.approval_policy),
        "note": "draft",
        "make_active": "on",
        "active_version": form["active_version"].value() or v1.version,
    }
    return client.post("/admin/agents/agentprofile/add/", data).status_code


def test_a_version_added_by_staff_who_may_not_change_profiles_is_saved_but_not_made_active(db):  # noqa: ANN001
    client = _staff_with("add_agentprofile", "view_agentprofile")

    status = _add_a_version(client)

    assert status == 302 and AgentProfile.objects.filter(version=2).exists(), status
    assert active_profile().version == 1, (
        "a member of staff who may add agent profile versions but not change them made their draft (version 2) "
        "the active version from the add page"
    )


def test_staff_who_may_change_profiles_make_the_added_version_active(db):  # noqa: ANN001
    client = _staff_with("add_agentprofile", "change_agentprofile", "view_agentprofile")

    assert _add_a_version(client) == 302
    assert active_profile().version == 2
