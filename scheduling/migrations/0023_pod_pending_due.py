from django.db import migrations, models


class Migration(migrations.Migration):
    """An index of the pending pods by when they are due: a cycle's due pods and a wake's
    backed-off pods are found without walking every pending pod."""

    dependencies = [
        ("scheduling", "0022_allocation_owed"),
    ]

    operations = [
        migrations.AddIndex(
            model_name="pod",
            index=models.Index(
                condition=models.Q(("gated", False), ("parked", False), ("status", "pending")),
                fields=["next_attempt_at"],
                name="pod_pending_due",
            ),
        ),
    ]
