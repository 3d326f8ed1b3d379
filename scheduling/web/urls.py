"""URLs of the scheduling app: the dashboard pages and sign-in."""

from django.urls import include, path

from scheduling.web import views

urlpatterns = [
    path("", views.home, name="home"),
    path("pending/", views.pending, name="pending"),
    path("pods/<str:namespace>/<str:name>/", views.pod, name="pod"),
    path("nodes/<str:name>/", views.node, name="node"),
    path("simulator/", views.simulator, name="simulator"),
    path("cycles/", views.cycles, name="cycles"),
    path("events/", views.events, name="events"),
    path("live/", views.live, name="live"),
    path("accounts/", include("django.contrib.auth.urls")),
]
