"""A member of staff restored by a move stays a member of staff.

README (state bundle): the users the rows name are carried by username, with their staff flag
and group names; restore creates those not here. A group the new deployment does not have (one
made by hand where the bundle was written) is not a name restore can give rights to: a support
agent who was staff only through it would be created as a plain login, a customer's kind, and
the next move naming them as staff would be refused. Restore refuses instead, naming the group.
"""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group, Permission
from django.core.management.base import CommandError

from approvals import services as approval_services
from approvals.models import ApprovalRequest
from tests.state.conftest import export, paused_ticket
from tests.state.test_bundle import empty_the_ledger, ledger_counts, restore

pytestmark = [pytest.mark.django_db, pytest.mark.timeout(120)]


def test_restore_refuses_a_staff_member_whose_group_this_database_lacks_and_writes_nothing(tmp_path):
    ticket, _ = paused_ticket()
    approvers = Group.objects.create(name="Refund approvers")
    approvers.permissions.add(Permission.objects.get(codename="decide_approval"))
    sam = get_user_model().objects.create_user(username="sam", password="staff-pass-123")
    sam.groups.add(approvers)
    sam = get_user_model().objects.get(pk=sam.pk)
    approval = ApprovalRequest.objects.get(ticket=ticket)
    approval_services.approval_decide(approval_id=approval.pk, user=sam, approve=False, note="Not this one")
    path = export(tmp_path, ticket, include_personal_data=True)
    empty_the_ledger()
    approvers.delete()  # the new deployment never had that group
    counts = ledger_counts()

    with pytest.raises(CommandError) as refused:
        restore(path)

    assert "'sam'" in str(refused.value) and "'Refund approvers'" in str(refused.value)
    assert "Nothing was restored" in str(refused.value)
    assert ledger_counts() == counts
    assert not get_user_model().objects.filter(username="sam").exists()
