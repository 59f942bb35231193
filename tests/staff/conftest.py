from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group

from staff.permissions import GROUP

STAFF_PASSWORD = "staff-pass-123"


def make_support_staff(username: str, *, first_name: str = "", last_name: str = "") -> object:
    """A member of the "Support staff" group (created by a migration), as a new hire would be."""
    user = get_user_model().objects.create_user(
        username=username, password=STAFF_PASSWORD, first_name=first_name, last_name=last_name, is_staff=True
    )
    user.groups.add(Group.objects.get(name=GROUP))
    return get_user_model().objects.get(pk=user.pk)


@pytest.fixture
def agent_person(db):  # noqa: ANN001
    return make_support_staff("maria", first_name="Maria", last_name="Lopez")
