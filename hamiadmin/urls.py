"""Top-level URLs: pages, admin, API, health, extender."""
from django.contrib import admin
from django.urls import include, path

urlpatterns = [
    path("admin/", admin.site.urls),
    path("extender/", include("agents.kube.urls")),
    path("", include("scheduling.api.urls")),
    path("", include("scheduling.urls")),
]
