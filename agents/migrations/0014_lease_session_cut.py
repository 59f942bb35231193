from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("agents", "0013_outage_patience"),
    ]

    operations = [
        migrations.AddField(
            model_name="ticketlease",
            name="session_cut",
            field=models.BooleanField(default=False),
        ),
    ]
