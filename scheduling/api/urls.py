"""REST API under /api/v1/, its schema and docs under /api/, and the probes at the root."""

from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularRedocView, SpectacularSwaggerView
from rest_framework.routers import SimpleRouter

from scheduling.ops.health import Healthz, Readyz

from . import views
from .views.base import ApiRootView
from .views.history_samples import SampleHistoryView

router = SimpleRouter()
router.register("nodes", views.NodeViewSet, basename="node")
router.register("cards", views.CardViewSet, basename="card")
router.register("decisions", views.DecisionViewSet, basename="decision")
router.register("allocations", views.AllocationViewSet, basename="allocation")
router.register("cycles", views.CycleViewSet, basename="cycle")
router.register("evictions", views.EvictionViewSet, basename="eviction")

pods = views.PodViewSet.as_view({"get": "list", "post": "create"})
pod = views.PodViewSet.as_view({"get": "retrieve", "delete": "destroy"})
pod_complete = views.PodViewSet.as_view({"post": "complete"})

NAMESPACE = "<str:namespace>"
NAME = "<str:name>"

api = [
    path("", ApiRootView.as_view(), name="root"),
    path("agents/report/", views.AgentReportView.as_view(), name="agent-report"),
    path("pods/", pods, name="pod-list"),
    path("pods/bulk/", include("scheduling.api.views.bulk")),
    path("pods/bulk/release/", include("scheduling.api.views.bulk_release")),
    path(f"pods/{NAMESPACE}/{NAME}/", pod, name="pod-detail"),
    path(f"pods/{NAMESPACE}/{NAME}/complete/", pod_complete, name="pod-complete"),
    path(f"pods/{NAMESPACE}/{NAME}/decision/", views.PodDecisionView.as_view(), name="pod-decision"),
    path("pending/", views.PendingView.as_view(), name="pending"),
    path("events/", views.EventList.as_view(), name="event-list"),
    path("config/", views.ConfigView.as_view(), name="config"),
    path("simulate/", views.SimulateView.as_view(), name="simulate"),
    path("simulate/<str:job>/", views.SimulationView.as_view(), name="simulation"),
    path("whatif/", views.WhatIfView.as_view(), name="whatif"),
    path("capacity/", views.CapacityView.as_view(), name="capacity"),
    path("history/samples/", SampleHistoryView.as_view(), name="history-samples"),
    path("queues/", views.QueueList.as_view(), name="queue-list"),
    path("queues/<str:name>/", views.QueueDetail.as_view(), name="queue-detail"),
    path("podgroups/", views.PodGroupList.as_view(), name="podgroup-list"),
    path(f"podgroups/{NAMESPACE}/{NAME}/", views.PodGroupDetail.as_view(), name="podgroup-detail"),
    path("namespacequotas/", views.NamespaceQuotaList.as_view(), name="namespacequota-list"),
    path(
        f"namespacequotas/{NAMESPACE}/{NAME}/",
        views.NamespaceQuotaDetail.as_view(),
        name="namespacequota-detail",
    ),
    *router.urls,
]

urlpatterns = [
    path("api/v1/", include((api, "api"), namespace="api")),
    path("api/schema/", SpectacularAPIView.as_view(), name="api-schema"),
    path("api/docs/", SpectacularSwaggerView.as_view(url_name="api-schema"), name="api-docs"),
    path("api/redoc/", SpectacularRedocView.as_view(url_name="api-schema"), name="api-redoc"),
    path("healthz", Healthz.as_view(), name="healthz"),
    path("readyz", Readyz.as_view(), name="readyz"),
]
