# The approval policy moves to the agent, which decides at intent time whether a call
# needs an approval (its tables keep their names); approval state on each call; refund
# statuses of the provider; amounts as big integers; the lease remembers a dead owner.

import django.db.models.deletion
from django.db import migrations, models


def mark_calls_that_waited_for_approval(apps, schema_editor):
    # Calls paused or decided before the approval state was recorded with the intent.
    ToolCall = apps.get_model("agents", "ToolCall")
    ToolCall.objects.filter(status="awaiting_approval").update(approval_required=True)
    ToolCall.objects.filter(approval_decision__isnull=False).update(approval_required=True)


def place_completed_steps_on_the_timeline(apps, schema_editor):
    # Steps completed before their timeline position was recorded: the last event before they completed.
    ModelStep = apps.get_model("agents", "ModelStep")
    TicketEvent = apps.get_model("tickets", "TicketEvent")
    for step in ModelStep.objects.filter(status="completed", ticket_seq__isnull=True).iterator():
        last = (
            TicketEvent.objects.filter(ticket_id=step.ticket_id, created_at__lte=step.completed_at or step.started_at)
            .order_by("-seq")
            .values_list("seq", flat=True)
            .first()
        )
        ModelStep.objects.filter(pk=step.pk).update(ticket_seq=last or 0)


class Migration(migrations.Migration):

    dependencies = [
        ('agents', '0003_toolcall_approval_digest_and_more'),
        ('approvals', '0001_initial'),
        ('tickets', '0001_initial'),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.CreateModel(
                    name='ApprovalPolicy',
                    fields=[
                        ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                        ('refund_threshold_cents', models.PositiveIntegerField(default=20000)),
                        ('ttl_hours', models.PositiveIntegerField(default=72, help_text='A request not decided in this time expires.')),
                        ('reminder_before_hours', models.PositiveIntegerField(default=12, help_text='Staff are reminded this long before a request expires.')),
                    ],
                    options={'verbose_name_plural': 'approval policy', 'db_table': 'approvals_approvalpolicy'},
                ),
                migrations.CreateModel(
                    name='ToolApprovalRule',
                    fields=[
                        ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                        ('tool_name', models.CharField(max_length=100, unique=True)),
                        ('requires_approval', models.BooleanField(default=True)),
                    ],
                    options={'db_table': 'approvals_toolapprovalrule'},
                ),
            ],
            database_operations=[],
        ),
        migrations.AlterField(
            model_name='approvalpolicy',
            name='refund_threshold_cents',
            field=models.PositiveBigIntegerField(default=20000, help_text="A refund needs a staff approval when it takes the order's refunds (done, pending or uncertain, plus this one) above this amount, in cents."),
        ),
        migrations.AddField(
            model_name='approvalpolicy',
            name='customer_limit_cents',
            field=models.PositiveBigIntegerField(blank=True, null=True, help_text="A refund needs a staff approval when it takes the customer's refunds in the window above this amount, in cents. Empty: the same as the order threshold."),
        ),
        migrations.AddField(
            model_name='approvalpolicy',
            name='customer_window_days',
            field=models.PositiveIntegerField(default=30, help_text='The rolling window of the per-customer limit, in days.'),
        ),
        migrations.AddField(
            model_name='ticketlease',
            name='previous_owner',
            field=models.CharField(blank=True, default='', max_length=200),
        ),
        migrations.AddField(
            model_name='modelstep',
            name='ticket_seq',
            field=models.PositiveIntegerField(blank=True, null=True),
        ),
        migrations.RunPython(place_completed_steps_on_the_timeline, migrations.RunPython.noop),
        migrations.AddField(
            model_name='toolcall',
            name='approval_required',
            field=models.BooleanField(default=False),
        ),
        migrations.AddField(
            model_name='toolcall',
            name='approval_reason',
            field=models.TextField(blank=True),
        ),
        migrations.RunPython(mark_calls_that_waited_for_approval, migrations.RunPython.noop),
        migrations.AlterField(
            model_name='toolcall',
            name='approval_decision',
            field=models.CharField(blank=True, choices=[('approved', 'Approved'), ('rejected', 'Rejected'), ('expired', 'Expired')], max_length=8, null=True),
        ),
        migrations.AlterField(
            model_name='refund',
            name='amount_cents',
            field=models.PositiveBigIntegerField(),
        ),
        migrations.AddField(
            model_name='refund',
            name='provider_status',
            field=models.CharField(blank=True, max_length=24),
        ),
        migrations.AddField(
            model_name='refund',
            name='escalated_at',
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.AlterField(
            model_name='refund',
            name='status',
            field=models.CharField(choices=[('requested', 'Requested'), ('submitted', 'Submitted to the provider'), ('pending', 'Pending at the provider'), ('succeeded', 'Succeeded'), ('failed', 'Failed'), ('uncertain', 'Uncertain (being reconciled)')], default='requested', max_length=12),
        ),
    ]
