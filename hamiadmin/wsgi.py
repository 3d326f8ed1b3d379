"""WSGI entry point (gunicorn hamiadmin.wsgi)."""

import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "hamiadmin.settings")
application = get_wsgi_application()
