"""A member of staff whose rights are their own (a permission given to them, not a group) or who is a
superuser keeps them through a move.

README (state bundle): the users the rows name are carried with their staff flag, superuser flag, group
names and their own permissions (``app_label.codename``); restore creates those not here with them,
refuses a permission this database does not have (naming it), and reads bundles of the format before,
which carried no permissions. Before, sam, who decides approvals through a permission of his own, came
back with no rights at all (a customer's kind of login), and a move into a deployment where sam already
had it was refused as "a customer in the bundle and staff in this database".
"""

from __future__ import annotations

import json

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from django.contrib.contenttypes.models import ContentType
from django.core.management.base import CommandError

from approvals import services as approval_services
from approvals.models import ApprovalRequest
from state import bundle
from tests.state.conftest import export, paused_ticket, rewrite_part, verify, write_manifest
from tests.state.test_bundle import empty_the_ledger, ledger_counts, restore
from tickets.models import Ticket

pytestmark = [pytest.mark.django_db, pytest.mark.timeout(120)]


def _decided_by(ticket, username: str, *, superuser: bool = False, permission: Permission | None = None):  # noqa: ANN001
    """``username`` rejects the ticket's approval, through a permission of their own (and ``permission``),
    or as a superuser."""
    if superuser:
        user = get_user_model().objects.create_superuser(username=username, password="staff-pass-123")
    else:
        user = get_user_model().objects.create_user(username=username, password="staff-pass-123")
        extra = [permission] if permission else []
        user.user_permissions.add(Permission.objects.get(codename="decide_approval"), *extra)
    user = get_user_model().objects.get(pk=user.pk)
    approval = ApprovalRequest.objects.get(ticket=ticket)
    approval_services.approval_decide(approval_id=approval.pk, user=user, approve=False, note="Not this one")
    return user


def test_a_staff_member_with_a_permission_of_their_own_keeps_it(tmp_path):
    ticket, _ = paused_ticket()
    _decided_by(ticket, "sam")
    path = export(tmp_path, ticket, include_personal_data=True)
    empty_the_ledger()

    restore(path)

    sam = get_user_model().objects.get(username="sam")
    assert sam.has_perm("approvals.decide_approval"), "sam came back without the right to decide approvals"
    assert not sam.is_superuser


def test_verify_shows_the_rights_each_carried_user_would_be_given(tmp_path):
    ticket, _ = paused_ticket("carla")
    _decided_by(ticket, "sam")
    path = export(tmp_path, ticket, include_personal_data=True)

    status, out = verify(path)

    assert status == 0, out
    assert "carla, sam (approvals.decide_approval)" in out, out


def test_a_superuser_stays_a_superuser(tmp_path):
    ticket, _ = paused_ticket()
    _decided_by(ticket, "root", superuser=True)
    path = export(tmp_path, ticket, include_personal_data=True)
    empty_the_ledger()

    restore(path)

    root = get_user_model().objects.get(username="root")
    assert root.is_superuser and root.is_staff


def test_a_staff_member_here_with_that_permission_is_matched_not_refused(tmp_path):
    ticket, _ = paused_ticket()
    _decided_by(ticket, "sam")
    path = export(tmp_path, ticket, include_personal_data=True)
    empty_the_ledger()
    sam = get_user_model().objects.create_user(username="sam", password="staff-pass-123")
    sam.user_permissions.add(Permission.objects.get(codename="decide_approval"))

    out = restore(path)

    assert "matched by username (sam)" in out, out
    assert ApprovalRequest.objects.get(ticket_id=ticket.pk).decided_by_id == sam.pk


def test_restore_refuses_a_permission_this_database_lacks_and_writes_nothing(tmp_path):
    ticket, _ = paused_ticket()
    made_by_hand = Permission.objects.create(
        codename="see_every_refund", name="See every refund", content_type=ContentType.objects.get_for_model(Ticket)
    )
    _decided_by(ticket, "sam", permission=made_by_hand)
    path = export(tmp_path, ticket, include_personal_data=True)
    empty_the_ledger()
    made_by_hand.delete()  # the new deployment never had it
    counts = ledger_counts()

    with pytest.raises(CommandError) as refused:
        restore(path)

    message = str(refused.value)
    assert "Nothing was restored" in message and "'sam'" in message and "'tickets.see_every_refund'" in message
    assert ledger_counts() == counts
    assert not get_user_model().objects.filter(username="sam").exists()


def test_a_bundle_of_the_format_before_is_still_restored(tmp_path):
    """Version 1 carried no permissions and no superuser flag: its users are restored as they were. It
    carried no signature either: it is read when the operator accepts an unsigned bundle."""
    ticket, _ = paused_ticket()
    _decided_by(ticket, "sam")
    path = export(tmp_path, ticket, include_personal_data=True)
    rewrite_part(
        path,
        "auth.User",
        lambda rows: [{k: v for k, v in r.items() if k not in ("permissions", "is_superuser")} for r in rows],
    )
    manifest = json.loads((path / bundle.MANIFEST).read_text())
    manifest["format_version"] = 1
    write_manifest(path, manifest, signed=False)
    empty_the_ledger()

    assert verify(path, allow_unsigned=True)[0] == 0, verify(path, allow_unsigned=True)[1]
    out = restore(path, allow_unsigned=True)

    assert Ticket.objects.filter(pk=ticket.pk).exists()
    assert get_user_model().objects.filter(username="sam").exists()
    # It cannot know sam's rights, and says so rather than leave him a plain login unsaid.
    assert "Note: the user 'sam', no customer's login, was created without any rights" in out, out
    assert f"'{ticket.customer.user.username}', no customer's login" not in out, out


def test_verify_and_restore_refuse_a_user_carried_twice(tmp_path):
    """Two rows of one login (one of them a superuser): which is sam? Restore created him from the first
    and matched the second to him; verify listed both."""
    ticket, _ = paused_ticket()
    _decided_by(ticket, "sam")
    path = export(tmp_path, ticket, include_personal_data=True)
    rewrite_part(
        path,
        "auth.User",
        lambda rows: [*rows, *({**r, "is_superuser": True, "is_staff": True} for r in rows if r["username"] == "sam")],
    )
    empty_the_ledger()
    counts = ledger_counts()

    status, out = verify(path)
    assert status == 1 and "auth.User sam is in the bundle 2 times" in out, out
    with pytest.raises(CommandError, match="auth.User sam is in the bundle 2 times"):
        restore(path)
    assert ledger_counts() == counts
    assert not get_user_model().objects.filter(username="sam").exists()


@pytest.mark.parametrize(
    "forged",
    [
        {"permissions": "approvals.decide_approval"},
        {"permissions": ["decide_approval"]},
        {"is_superuser": "yes"},
    ],
)
def test_verify_and_restore_refuse_a_user_row_whose_rights_are_not_rights(tmp_path, forged):
    ticket, _ = paused_ticket()
    _decided_by(ticket, "sam")
    path = export(tmp_path, ticket, include_personal_data=True)
    rewrite_part(path, "auth.User", lambda rows: [{**r, **forged} if r["username"] == "sam" else r for r in rows])
    empty_the_ledger()
    counts = ledger_counts()

    status, out = verify(path)
    assert status == 1 and "FAILED every row is a row of its table" in out and "'sam'" in out, out
    with pytest.raises(CommandError, match="Nothing was restored"):
        restore(path)
    assert ledger_counts() == counts
