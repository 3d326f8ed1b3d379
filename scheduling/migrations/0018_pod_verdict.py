# The verdict class of a waiting pod (engine.triage), filterable on the Pending page and the API.

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("scheduling", "0017_pod_held_until"),
    ]

    operations = [
        migrations.AddField(
            model_name="pod",
            name="verdict",
            field=models.CharField(
                blank=True,
                choices=[
                    ("never", "never fits here"),
                    ("capacity", "waits for capacity"),
                    ("rule", "held by a rule"),
                    ("invalid", "invalid"),
                ],
                db_default="",
                default="",
                help_text="the latest waiting decision's class (engine.triage); empty once placed or not tried",
                max_length=16,
            ),
        ),
    ]
