from django.apps import AppConfig


class SchedulingConfig(AppConfig):
    name = "scheduling"
    verbose_name = "GPU scheduling"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self):
        """The Celery app (broker from settings) exists before anything sends a task:
        `shared_task` sends through the current app, and hamiadmin no longer loads it on import."""
        import hamiadmin.celery  # noqa: F401
