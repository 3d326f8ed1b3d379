"""hamiadmin: the Django project, its settings and the Celery app.

The Celery app is loaded by `celery -A hamiadmin` and, in every Django process, by
scheduling's AppConfig.ready, not by importing this package: `hamiadmin.logging` must stay
importable without Django (the NVML agent uses it and imports no Django).
"""


def __getattr__(name: str):
    if name == "celery_app":
        from .celery import app

        return app
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
