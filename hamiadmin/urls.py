"""Top-level URLs: pages, admin, API, health, metrics, extender."""

from django.contrib import admin
from django.urls import include, path

from scheduling.ops.scrape import metrics_view

urlpatterns = [
    path("admin/", admin.site.urls),
    path("extender/", include("kube.urls")),
    path("metrics", metrics_view, name="metrics"),
    path("", include("scheduling.api.urls")),
    path("", include("scheduling.web.urls")),
]
