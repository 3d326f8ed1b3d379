"""The Celery application. Broker and result backend come from settings (REDIS_URL)."""

import os

from celery import Celery

from scheduling.ops import celery_process

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "hamiadmin.settings")

app = Celery("hamiadmin")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
celery_process.install(app)  # heartbeat file for liveness probes, metrics port (docs/deploy.md)
