from django.db import migrations, models


def told_before(apps, schema_editor):  # noqa: ANN001, ANN201
    """Refunds told of before episodes were counted: the customer's message under the keys of then."""
    Refund = apps.get_model("agents", "Refund")
    Message = apps.get_model("tickets", "Message")
    for refund in Refund.objects.filter(escalated_at__isnull=False).iterator():
        keys = [f"refund-problem:{refund.pk}", f"escalation:{refund.tool_call_id}"]
        if not Message.objects.filter(ticket_id=refund.ticket_id, client_msg_id__in=keys).exists():
            continue
        if Message.objects.filter(ticket_id=refund.ticket_id, client_msg_id=f"refund-paid-after-all:{refund.pk}").exists():
            refund.told, refund.tells = "paid", 2
        else:
            refund.told, refund.tells = ("failed" if refund.status == "failed" else "unconfirmed"), 1
        refund.save(update_fields=["told", "tells"])


class Migration(migrations.Migration):
    dependencies = [
        ("agents", "0018_tool_call_outcome_updated_in_place"),
        ("tickets", "0001_initial"),
    ]

    operations = [
        migrations.AddField(
            model_name="refund",
            name="told",
            field=models.CharField(
                blank=True,
                choices=[
                    ("", "Nothing yet"),
                    ("failed", "Could not be completed"),
                    ("unconfirmed", "Could not be confirmed"),
                    ("pending", "Being processed after all"),
                    ("paid", "Paid after all"),
                ],
                default="",
                max_length=12,
            ),
        ),
        migrations.AddField(
            model_name="refund",
            name="tells",
            field=models.PositiveIntegerField(default=0),
        ),
        migrations.RunPython(told_before, migrations.RunPython.noop),
    ]
