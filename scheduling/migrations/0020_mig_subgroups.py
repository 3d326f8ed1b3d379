from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("scheduling", "0019_cyclelease"),
    ]

    operations = [
        migrations.AddField(
            model_name="boundpod",
            name="mig_allocations",
            field=models.TextField(blank=True, default="", help_text="hami.io/vgpu-mig-allocations"),
        ),
        migrations.AddField(
            model_name="card",
            name="mig_profiles",
            field=models.JSONField(
                blank=True,
                default=list,
                help_text="a MIG card's profiles, as HAMi v2.10 registers them (migProfiles)",
            ),
        ),
        migrations.AddField(
            model_name="pod",
            name="extra_annotations",
            field=models.JSONField(
                blank=True,
                default=dict,
                help_text="what the placement writes beside the allocation (hami.io/vgpu-mig-allocations)",
            ),
        ),
        migrations.AlterField(
            model_name="podgroup",
            name="subgroups",
            field=models.JSONField(
                blank=True,
                default=list,
                help_text="the gang's parts, each with its own minimum ([{name, min_member}]): each must reach it",
            ),
        ),
    ]
