"""A permission an operator took from the "Support staff" group in the admin (only team leads decide
refunds: "decide approval" removed) stays taken after a deploy: every ``migrate`` gave the group all
its first permissions back, so after the next deploy every member of the team could approve refunds
again, unseen. A database without the group (emptied by ``flush``) still gets it back whole."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Group, Permission
from django.core.management import call_command

from staff.permissions import GROUP, PERMISSIONS
from tests.staff.conftest import make_support_staff

pytestmark = pytest.mark.django_db(transaction=True)


def codenames(group: Group) -> set[str]:
    return set(group.permissions.values_list("codename", flat=True))


def test_a_permission_taken_from_the_support_group_stays_taken_after_migrate(admin_client):  # noqa: ANN001
    group = Group.objects.get(name=GROUP)
    decide = Permission.objects.get(content_type__app_label="approvals", codename="decide_approval")
    page = admin_client.get(f"/admin/auth/group/{group.pk}/change/").context["adminform"].form
    kept = [str(p) for p in page["permissions"].value() if int(p) != decide.pk]
    saved = admin_client.post(
        f"/admin/auth/group/{group.pk}/change/",
        {"name": GROUP, "permissions": kept, "page_read": page["page_read"].value()},
    )
    assert saved.status_code == 302
    assert "decide_approval" not in codenames(group)

    call_command("migrate", verbosity=0)  # a deploy

    assert "decide_approval" not in codenames(Group.objects.get(name=GROUP))
    member = make_support_staff("teammate")
    assert not member.has_perm("approvals.decide_approval")


def test_a_database_without_the_support_group_gets_it_back_whole():
    Group.objects.filter(name=GROUP).delete()

    call_command("migrate", verbosity=0)

    assert codenames(Group.objects.get(name=GROUP)) == {codename for _, codename in PERMISSIONS}
