"""A staff member's (or a group's) admin page read before a colleague deactivated them, or took them out of the
"Support staff" group, does not give them their access back on Save.

Django compares what a change page posts with the row as it is at the save, so a page read before
wrote "active" and the old groups back with any other correction made on it (a surname): the
person who left could sign in and work tickets again. The page writes only what was changed on
it, and refuses a change to a value someone changed since it was read.
"""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group, Permission
from django.urls import reverse

from tests.staff.conftest import STAFF_PASSWORD, make_support_staff
from tests.tickets.test_order_page_read_before_a_status_change import _admin, _page_as_shown_at

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("taken_away", ["deactivated", "out of the group"])
def test_a_stale_user_page_does_not_give_back_access_a_colleague_took_away(taken_away):  # noqa: ANN001
    maria = make_support_staff("maria")
    first = _admin("first-admin")
    change = reverse("admin:auth_user_change", args=[maria.pk])
    stale = _page_as_shown_at(first, change)  # maria active, in "Support staff"

    if taken_away == "deactivated":
        get_user_model().objects.filter(pk=maria.pk).update(is_active=False)
    else:
        maria.groups.clear()

    stale["last_name"] = "Lopez"  # the first admin only corrects her surname
    answer = first.post(change, stale)
    assert answer.status_code == 302, answer.context["errors"] if answer.context else answer
    maria = get_user_model().objects.get(pk=maria.pk)
    assert maria.last_name == "Lopez"
    assert not maria.has_perm("tickets.handle_ticket"), f"a page read before maria was {taken_away} gave it back"


def test_the_user_page_refuses_a_change_to_groups_someone_changed_since_it_was_read():
    maria = make_support_staff("maria")
    other = Group.objects.create(name="Refund reviewers")
    first = _admin("first-admin")
    change = reverse("admin:auth_user_change", args=[maria.pk])
    stale = _page_as_shown_at(first, change)  # in "Support staff"
    maria.groups.clear()  # a colleague takes her out of it

    stale["groups"] = [*stale["groups"], other.pk]  # the first admin adds a group on the page read before
    stale["last_name"] = "Lopez"
    answer = first.post(change, stale)
    assert answer.status_code == 200 and "changed by someone else" in answer.content.decode()
    maria = get_user_model().objects.get(pk=maria.pk)
    assert (list(maria.groups.all()), maria.last_name) == ([], ""), "saved from a refused page"


def test_a_user_page_saved_with_a_change_still_saves_it():
    maria = make_support_staff("maria")
    first = _admin("first-admin")
    change = reverse("admin:auth_user_change", args=[maria.pk])
    page = _page_as_shown_at(first, change)
    page.pop("groups")  # taken out of every group on the page itself
    page["last_name"] = "Lopez"
    assert first.post(change, page).status_code == 302
    maria = get_user_model().objects.get(pk=maria.pk)
    assert (maria.last_name, list(maria.groups.all())) == ("Lopez", [])
    assert maria.check_password(STAFF_PASSWORD), "the page's Save changed her password"


def test_a_stale_group_page_does_not_give_back_a_permission_a_colleague_took_from_the_group():
    reviewers = Group.objects.create(name="Refund reviewers")
    decide = Permission.objects.get(content_type__app_label="approvals", codename="decide_approval")
    reviewers.permissions.add(decide)
    first = _admin("first-admin")
    change = reverse("admin:auth_group_change", args=[reviewers.pk])
    stale = _page_as_shown_at(first, change)  # the group may decide approvals
    reviewers.permissions.remove(decide)  # a colleague takes that from the group

    stale["name"] = "Refund helpers"  # the first admin only renames it
    assert first.post(change, stale).status_code == 302
    reviewers = Group.objects.get(pk=reviewers.pk)
    assert reviewers.name == "Refund helpers"
    assert not reviewers.permissions.filter(pk=decide.pk).exists(), "a page read before gave the permission back"
