# The approval policy and per-tool rules now belong to the agents app (same tables).

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('approvals', '0001_initial'),
        ('agents', '0004_money_path'),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.DeleteModel(name='ApprovalPolicy'),
                migrations.DeleteModel(name='ToolApprovalRule'),
            ],
            database_operations=[],
        ),
        migrations.AlterField(
            model_name='approvalrequest',
            name='amount_cents',
            field=models.PositiveBigIntegerField(blank=True, null=True),
        ),
    ]
