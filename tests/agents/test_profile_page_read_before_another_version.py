"""An agent profile page saved after another version became active is refused, not made active
over it.

README ("Agent profiles") and DESIGN.md: loosening a money rule is done where it is seen, a new
version with its diff. Saving a version's page makes the next version from everything the page
shows: a page opened before a colleague made a stricter version active (a lower approval
threshold) put the old threshold back, active, when it was saved for an unrelated change (the
system prompt), and refunds above the colleague's threshold were paid without review. The
approval policy page refuses a page read before another version became active; the profile page
now does too. A page sent twice (a double click on Save) makes one version.
"""

from __future__ import annotations

import json

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from agents.models import AgentProfile
from agents.profiles import active_profile

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(120)]


def _page(client: Client, profile: AgentProfile) -> dict:
    page = client.get(f"/admin/agents/agentprofile/{profile.pk}/change/")
    assert page.status_code == 200
    form = page.context["adminform"].form
    data = {name: form[name].value() for name in form.fields}
    data = {name: "" if value is None else value for name, value in data.items()}
    data["make_active"] = "on"
    return data


def _admin(name: str) -> Client:
    client = Client()
    client.force_login(get_user_model().objects.create_superuser(name, f"{name}@example.test", "pw-admin-123"))
    return client


def test_a_profile_page_read_before_a_colleague_made_a_stricter_version_active_does_not_undo_it():
    opened = active_profile()
    ana, ben = _admin("ana"), _admin("ben")
    anas_page = _page(ana, opened)  # Ana opens the active version to edit the prompt
    bens_page = _page(ben, opened)
    stricter = {**json.loads(bens_page["approval_policy"]), "refund_threshold_cents": 1000}
    bens_page.update(approval_policy=json.dumps(stricter), note="review refunds above $10")
    assert ben.post(f"/admin/agents/agentprofile/{opened.pk}/change/", bens_page).status_code == 302
    assert active_profile().approval_policy["refund_threshold_cents"] == 1000

    anas_page.update(system_prompt="Be brief.", note="brevity")
    late = ana.post(f"/admin/agents/agentprofile/{opened.pk}/change/", anas_page)

    active = active_profile()
    assert active.approval_policy["refund_threshold_cents"] == 1000, (
        f"Ana's page, read before Ben's stricter version became active, made version {active.version} active "
        f"with the old threshold {active.approval_policy['refund_threshold_cents']}: Ben's review rule is undone"
    )
    assert late.status_code == 200 and "since this page was opened" in late.content.decode()
    assert AgentProfile.objects.count() == 2


def test_a_profile_page_sent_twice_makes_one_version():
    opened = active_profile()
    ana = _admin("ana")
    page = _page(ana, opened)
    page.update(system_prompt="Be brief.", note="brevity")
    assert ana.post(f"/admin/agents/agentprofile/{opened.pk}/change/", page).status_code == 302
    again = ana.post(f"/admin/agents/agentprofile/{opened.pk}/change/", page)

    assert AgentProfile.objects.count() == 2, "a double click on Save made two versions"
    assert again.status_code == 200 and "saved by ana" in again.content.decode()
