from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission


def make_staff(username: str, *, can_decide: bool) -> object:
    user = get_user_model().objects.create_user(username=username, password="staff-pass-123", is_staff=True)
    if can_decide:
        user.user_permissions.add(Permission.objects.get(codename="decide_approval"))
    return get_user_model().objects.get(pk=user.pk)  # fresh permission cache


@pytest.fixture
def approver(db):  # noqa: ANN001
    return make_staff("approver", can_decide=True)


@pytest.fixture
def plain_staff(db):  # noqa: ANN001
    return make_staff("plainstaff", can_decide=False)
