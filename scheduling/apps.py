from django.apps import AppConfig


class SchedulingConfig(AppConfig):
    name = "scheduling"
    verbose_name = "GPU scheduling"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self):
        """The Celery app (broker from settings) exists before anything sends a task:
        `shared_task` sends through the current app, and hamiadmin no longer loads it on import.
        Refused sign-in forms count towards the client's failed credentials (hamiadmin/auth_failures.py).
        The queue gauges join the scrape's cluster state here: their reader is a service, above ops.
        The pipeline's preemption hooks are the eviction services' (the pipeline imports no service)."""
        from django.contrib.auth.signals import user_login_failed

        import hamiadmin.celery  # noqa: F401
        from hamiadmin.auth_failures import signed_in_failed

        user_login_failed.connect(signed_in_failed, dispatch_uid="hamiadmin.auth_failures")

        from scheduling.ops.scrape import CLUSTER_STATE
        from scheduling.services.batch import register_queue_metrics

        register_queue_metrics(CLUSTER_STATE)

        from scheduling.pipeline.preemption import hooks
        from scheduling.services.evictions import carry_out_local, settle_evictions

        hooks.settle = settle_evictions
        hooks.carry_out = carry_out_local
