from __future__ import annotations

from typing import Any

from django.apps import AppConfig
from django.db.models.signals import post_migrate


class StaffConfig(AppConfig):
    name = "staff"
    verbose_name = "Staff inbox"

    def ready(self) -> None:
        post_migrate.connect(_keep_support_staff_group, sender=self, dispatch_uid="staff.support_group")


def _keep_support_staff_group(sender: AppConfig, using: str = "default", **kwargs: Any) -> None:
    """The migration creates the group; a database emptied since (``flush``, as tests do) gets it back.
    A group that is there is left as it is: what an operator changed on it in the admin (a permission
    taken away: only team leads decide refunds) was given back by every ``migrate``, every deploy."""
    from django.contrib.auth.models import Group, Permission

    from staff import permissions as support_group

    group, created = Group.objects.using(using).get_or_create(name=support_group.GROUP)
    if not created:
        return
    for app_label, codename in support_group.PERMISSIONS:
        found = Permission.objects.using(using).filter(content_type__app_label=app_label, codename=codename)
        permission = found.first()
        if permission is not None:
            group.permissions.add(permission)
