"""Which agent profile version new runs start with (its prompt, tools and approval rules) is changed by staff who
may change profiles (``agents.change_agentprofile``): the "Make this version active" action asks for it. The
admin's add page did not: "make active" is ticked by default there, and a member of staff allowed only to add
versions (to draft a prompt) made theirs the one every new run used, with whatever approval threshold it had."""

from __future__ import annotations

import json

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from django.test import Client

from agents.models import AgentProfile
from agents.profiles import active_profile

pytestmark = pytest.mark.django_db


def staff_with(username: str, *codenames: str) -> Client:
    user = get_user_model().objects.create_user(username=username, password="pw-for-tests-123", is_staff=True)
    user.user_permissions.add(*Permission.objects.filter(content_type__app_label="agents", codename__in=codenames))
    client = Client()
    client.force_login(user)
    return client


def new_version_form(client: Client, **changes: object) -> dict:
    v1 = active_profile()
    data = {
        "system_prompt": "Drafted prompt.",
        "model": v1.model,
        "model_parameters": json.dumps(v1.model_parameters),
        "tools": json.dumps(v1.tools),
        "approval_policy": json.dumps({**v1.approval_policy, "refund_threshold_cents": 10_000_000}),
        "note": "a draft",
        "make_active": "on",
        "active_version": str(v1.version),
    }
    return {**data, **changes}


def test_a_version_added_by_staff_who_may_not_change_profiles_is_saved_but_not_made_active():
    first = active_profile()
    drafter = staff_with("drafter", "add_agentprofile", "view_agentprofile")

    response = drafter.post("/admin/agents/agentprofile/add/", new_version_form(drafter), follow=True)

    assert response.status_code == 200, response.content.decode()[:2000]
    draft = AgentProfile.objects.get(note="a draft")
    assert draft.system_prompt == "Drafted prompt."
    assert active_profile().pk == first.pk, "a member of staff who may only add versions made theirs the active one"
    assert not draft.is_active
    assert "not made active" in response.content.decode()


def test_staff_who_may_change_profiles_still_make_the_version_they_add_active():
    editor = staff_with("editor", "add_agentprofile", "change_agentprofile", "view_agentprofile")

    editor.post("/admin/agents/agentprofile/add/", new_version_form(editor), follow=True)

    assert active_profile().note == "a draft"
