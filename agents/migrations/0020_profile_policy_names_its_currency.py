"""Each agent profile version names the currency of its approval policy's amounts.

The versions made before were read in APPROVAL_POLICY_CURRENCY as it was at each decision: they are
given its value now, the one they have been read in, and keep it whatever the setting says later.
"""

from django.conf import settings
from django.db import migrations


def name_the_currency(apps, schema_editor):  # noqa: ANN001, ANN201
    AgentProfile = apps.get_model("agents", "AgentProfile")  # noqa: N806
    for profile in AgentProfile.objects.order_by("pk"):
        policy = profile.approval_policy if isinstance(profile.approval_policy, dict) else {}
        if policy.get("currency"):
            continue
        AgentProfile.objects.filter(pk=profile.pk).update(
            approval_policy={**policy, "currency": settings.APPROVAL_POLICY_CURRENCY}
        )


class Migration(migrations.Migration):
    dependencies = [
        ("agents", "0019_refund_told"),
    ]

    operations = [
        migrations.RunPython(name_the_currency, migrations.RunPython.noop),
    ]
