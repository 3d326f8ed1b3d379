"""The URLs of the webhook's TLS server (`HAMIADMIN_URLCONF=kube.webhook.urls`): the two
webhooks, the probes and the metrics, nothing else; the dashboard and the API stay on the
web container's plain port behind the Ingress.

`login` and `admin:login` are named (and answer 404) only because the failed-credential
throttle (hamiadmin/auth_failures.py) looks them up to tell sign-in attempts apart; it keeps
counting wrong `/metrics` tokens here as it does on the web port.
"""

from django.http import Http404
from django.urls import include, path

from scheduling.ops.health import Healthz, Readyz
from scheduling.ops.scrape import metrics_view

from . import views


def not_served(request):
    raise Http404("not served on the webhook's port")


urlpatterns = [
    path("webhook/validate", views.validate_view, name="webhook-validate"),
    path("webhook/mutate", views.mutate_view, name="webhook-mutate"),
    path("healthz", Healthz.as_view(), name="healthz"),
    path("readyz", Readyz.as_view(), name="readyz"),
    path("metrics", metrics_view, name="metrics"),
    path("login/", not_served, name="login"),
    path("admin/", include(([path("login/", not_served, name="login")], "admin"))),
]
