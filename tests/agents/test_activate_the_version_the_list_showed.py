""" "Make this version active" on the profile list, pressed from a list read before a colleague made
another version active, is refused with a message naming both, and the colleague's version stays
active: it made the chosen version active over one the person never saw (a stricter approval rule
made meanwhile was undone, unseen). From the list as it is now, the version is made active."""

from __future__ import annotations

import re

import pytest

from agents.models import AgentProfile
from agents.profiles import active_profile, profile_new_version

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(60)]


def version_listed(admin_client) -> str:  # noqa: ANN001
    """The active version the profile list carries with its action (a hidden field)."""
    page = admin_client.get("/admin/agents/agentprofile/").content.decode()
    found = re.search(r'name="active_version" value="(\d+)"', page)
    assert found, "the profile list does not say which version it showed active"
    return found.group(1)


def make_active(admin_client, profile: AgentProfile, listed: str) -> str:  # noqa: ANN001
    response = admin_client.post(
        "/admin/agents/agentprofile/",
        {"action": "activate_profile", "_selected_action": [str(profile.pk)], "active_version": listed},
        follow=True,
    )
    return response.content.decode()


def test_making_a_version_active_from_a_list_read_before_a_colleague_made_another_active_is_refused(admin_client):  # noqa: ANN001
    assert active_profile().version == 1
    draft = profile_new_version(changes={"system_prompt": "A draft."}, user=None, activate=False)  # version 2
    assert admin_client.get("/admin/agents/agentprofile/").status_code == 200  # read while version 1 is active
    listed = "1"  # what that list sends back (test_the_profile_list_says_which_version_is_active)
    stricter = profile_new_version(changes={"system_prompt": "Stricter."}, user=None)  # a colleague's, meanwhile

    page = make_active(admin_client, draft, listed)

    assert active_profile().pk == stricter.pk, "made a version active over one the list never showed"
    assert "Version 3 was made active since this list was read (it showed version 1)" in page
    assert "No version was made active." in page
    # From the list as it is now, it is done.
    page = make_active(admin_client, draft, version_listed(admin_client))
    assert "Version 2 is active." in page
    assert active_profile().pk == draft.pk


def test_making_the_active_version_active_again_changes_nothing(admin_client):  # noqa: ANN001
    second = profile_new_version(changes={"system_prompt": "Second."}, user=None)
    listed = "2"

    make_active(admin_client, second, listed)
    page = make_active(admin_client, second, listed)  # the same form sent twice

    assert "Version 2 is active." in page
    assert list(AgentProfile.objects.filter(is_active=True).values_list("version", flat=True)) == [2]


def test_the_profile_list_says_which_version_is_active(admin_client):  # noqa: ANN001
    profile_new_version(changes={"system_prompt": "Second."}, user=None)

    assert version_listed(admin_client) == "2"
