"""URLs of the scheduling app: the dashboard pages and sign-in."""

from django.urls import include, path

from scheduling.web import actions, batch, views
from scheduling.web.login import ThrottledLoginView

urlpatterns = [
    path("", views.home, name="home"),
    path("pending/", views.pending, name="pending"),
    path("pods/", views.pods, name="pods"),
    path("pods/<str:namespace>/<str:name>/", views.pod, name="pod"),
    path("nodes/<str:name>/", views.node, name="node"),
    path("simulator/", views.simulator, name="simulator"),
    path("cycles/", views.cycles, name="cycles"),
    path("events/", views.events, name="events"),
    path("evictions/", views.evictions, name="evictions"),
    path("queues/", batch.queues, name="queues"),
    path("jobs/<str:namespace>/<str:name>/", batch.job, name="job"),
    path("live/", views.live, name="live"),
    path("nodes/<str:name>/cordon/", actions.node_cordon, {"on": True}, name="node-cordon"),
    path("nodes/<str:name>/uncordon/", actions.node_cordon, {"on": False}, name="node-uncordon"),
    path("nodes/<str:name>/drain/", actions.node_drain, name="node-drain"),
    path("cards/<str:uuid>/cordon/", actions.card_cordon, {"on": True}, name="card-cordon"),
    path("cards/<str:uuid>/uncordon/", actions.card_cordon, {"on": False}, name="card-uncordon"),
    path("pods/<str:namespace>/<str:name>/requeue/", actions.pod_requeue, name="pod-requeue"),
    path("pods/<str:namespace>/<str:name>/delete/", actions.pod_delete, name="pod-delete"),
    path("accounts/login/", ThrottledLoginView.as_view(), name="login"),  # before auth.urls' own
    path("accounts/", include("django.contrib.auth.urls")),
]
