"""The "Support staff" group: what a member of the support team needs, and nothing more.

Work tickets in the staff inbox, decide approvals, and read (not change) the ledger in the
admin. Permissions are created here first: Django otherwise creates them only after all
migrations have run.
"""

from __future__ import annotations

from django.contrib.auth.management import create_permissions
from django.db import migrations

from staff.permissions import GROUP, PERMISSIONS


def create_group(apps, schema_editor):  # noqa: ANN001, ANN201
    for app_config in apps.get_app_configs():
        app_config.models_module = True
        create_permissions(app_config, apps=apps, verbosity=0)
        app_config.models_module = None
    Group = apps.get_model("auth", "Group")
    Permission = apps.get_model("auth", "Permission")
    group, _ = Group.objects.get_or_create(name=GROUP)
    for app_label, codename in PERMISSIONS:
        group.permissions.add(Permission.objects.get(content_type__app_label=app_label, codename=codename))


def remove_group(apps, schema_editor):  # noqa: ANN001, ANN201
    apps.get_model("auth", "Group").objects.filter(name=GROUP).delete()


class Migration(migrations.Migration):
    dependencies = [
        ("auth", "0012_alter_user_first_name_max_length"),
        ("contenttypes", "0002_remove_content_type_name"),
        ("tickets", "0002_ticket_handle_permission"),
        ("agents", "0006_step_request_prefix"),
        ("approvals", "0002_policy_moves_to_agents"),
    ]

    operations = [migrations.RunPython(create_group, remove_group)]
