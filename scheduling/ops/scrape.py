"""`GET /metrics` on the web app: this process's event series (`scheduling.ops.metrics`) plus
the cluster state, read from the database at scrape time. Only the web process serves the
cluster-state gauges (`hamiadmin_card_*`, pending pods, node ages), so they are counted once
however many workers run; workers and the kube agent serve their event series on their own
port (`metrics.serve_from_env`).
"""

from __future__ import annotations

import hmac
import logging

from django.conf import settings
from django.db import DatabaseError
from django.db.models import Count
from django.http import HttpResponse, HttpResponseNotAllowed
from django.utils import timezone
from prometheus_client import REGISTRY, CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily

from scheduling.models import Card, Eviction, Node, Nomination, Pod

from .hami_metrics import HamiMetricsCollector
from .metrics import CONTENT_TYPE, MIB

log = logging.getLogger("scheduling.ops.metrics")

# --- cluster state, read at scrape time -----------------------------------------------


class ClusterStateCollector:
    """Gauges computed from the database on each scrape of `/metrics` (seven queries, and three
    for HAMi's names: `hami_metrics`).

    A database error does not fail the scrape: the event series are still served and
    `hamiadmin_cluster_state_up` says 0.
    """

    def collect(self):
        up = GaugeMetricFamily(
            "hamiadmin_cluster_state_up", "1 if the cluster state below was read from the database."
        )
        try:
            families = self._families(timezone.now())
        except DatabaseError as exc:
            log.warning("metrics: cluster state not read: %s", type(exc).__name__)
            up.add_metric([], 0)
            yield up
            return
        up.add_metric([], 1)
        yield up
        yield from families

    @staticmethod
    def _families(now) -> list:
        pending = GaugeMetricFamily(
            "hamiadmin_pending_pods", "Pods waiting for a placement (parked invalid pods included)."
        )
        pending.add_metric([], Pod.objects.filter(status=Pod.PENDING).count())

        labels = ["node", "uuid", "type"]
        card_families = {
            "slots": GaugeMetricFamily("hamiadmin_card_slots", "vGPU slots a card offers.", labels=labels),
            "used_slots": GaugeMetricFamily(
                "hamiadmin_card_slots_used", "vGPU slots in use on a card.", labels=labels
            ),
            "memory": GaugeMetricFamily("hamiadmin_card_memory_bytes", "Memory of a card.", labels=labels),
            "used_memory": GaugeMetricFamily(
                "hamiadmin_card_memory_used_bytes", "Memory of a card granted to pods.", labels=labels
            ),
            "cores": GaugeMetricFamily(
                "hamiadmin_card_cores", "Compute of a card in percent (100 = the whole card).", labels=labels
            ),
            "used_cores": GaugeMetricFamily(
                "hamiadmin_card_cores_used", "Compute of a card granted to pods, in percent.", labels=labels
            ),
        }
        rows = Card.objects.order_by("node__name", "index", "uuid").values_list(
            "node__name",
            "uuid",
            "type",
            "slots",
            "used_slots",
            "memory",
            "used_memory",
            "cores",
            "used_cores",
        )
        for node, uuid, card_type, slots, used_slots, memory, used_memory, cores, used_cores in rows:
            values = [node, uuid, card_type]
            card_families["slots"].add_metric(values, slots)
            card_families["used_slots"].add_metric(values, used_slots)
            card_families["memory"].add_metric(values, memory * MIB)
            card_families["used_memory"].add_metric(values, used_memory * MIB)
            card_families["cores"].add_metric(values, cores)
            card_families["used_cores"].add_metric(values, used_cores)

        age = GaugeMetricFamily(
            "hamiadmin_node_report_age_seconds",
            "Seconds since a node's agent last reported (nodes that never reported are left out).",
            labels=["node"],
        )
        ready = GaugeMetricFamily(
            "hamiadmin_node_ready", "1 if the node takes new pods (its agent reports).", labels=["node"]
        )
        for name, is_ready, heartbeat in Node.objects.order_by("name").values_list(
            "name", "ready", "last_heartbeat"
        ):
            ready.add_metric([name], 1 if is_ready else 0)
            if heartbeat is not None:
                age.add_metric([name], max(0.0, (now - heartbeat).total_seconds()))
        over = GaugeMetricFamily(
            "hamiadmin_cards_over_capacity",
            "Cards whose latest report is smaller than what their tenants hold (Card.over_capacity).",
        )
        over.add_metric([], Card.objects.exclude(over_capacity="").count())
        return [
            pending,
            *card_families.values(),
            age,
            ready,
            over,
            *_measured_families(),
            *_preemption_families(now),
            *HamiMetricsCollector().collect(),
        ]


def _preemption_families(now) -> list:
    """Evictions by kind and state (every pair, 0 included, so a rate or an alert never meets a
    missing series), and the nominations still holding cards for a preemptor (two queries)."""
    evictions = GaugeMetricFamily(
        "hamiadmin_evictions",
        "Evictions recorded, by kind (preempt, reclaim) and state (requested ... cancelled).",
        labels=["kind", "state"],
    )
    counted = {
        (row["kind"], row["state"]): row["n"]
        for row in Eviction.objects.order_by().values("kind", "state").annotate(n=Count("id"))
    }
    for kind, _ in Eviction.KINDS:
        for state, _ in Eviction.STATES:
            evictions.add_metric([kind, state], counted.get((kind, state), 0))
    nominations = GaugeMetricFamily(
        "hamiadmin_nominations", "vGPUs preemptors hold on cards while their victims leave (unexpired)."
    )
    nominations.add_metric([], Nomination.objects.filter(expires_at__gt=now).count())
    return [evictions, nominations]


def _measured_families() -> list:
    """What the agents measured, per card that reported it (one query), and the cards whose
    measured memory passes what their tenants were granted (`Card.memory_overuse`)."""
    labels = ["node", "uuid", "type"]
    families = {
        "observed_memory": GaugeMetricFamily(
            "hamiadmin_card_memory_observed_bytes",
            "Memory in use on a card as NVML measures it.",
            labels=labels,
        ),
        "utilization": GaugeMetricFamily(
            "hamiadmin_card_utilization_percent", "GPU busy time as NVML measures it.", labels=labels
        ),
        "temperature": GaugeMetricFamily(
            "hamiadmin_card_temperature_celsius", "GPU temperature.", labels=labels
        ),
        "power": GaugeMetricFamily("hamiadmin_card_power_watts", "GPU power draw.", labels=labels),
        "ecc_errors": GaugeMetricFamily(
            "hamiadmin_card_ecc_errors", "Uncorrectable ECC errors since the driver loaded.", labels=labels
        ),
    }
    overuse = GaugeMetricFamily(
        "hamiadmin_card_memory_overuse_bytes",
        "Memory a card uses beyond what its tenants were granted (and a margin for the driver).",
        labels=labels,
    )
    overused = 0
    rows = (
        Card.objects.filter(observed_at__isnull=False)
        .order_by("node__name", "index", "uuid")
        .values_list("node__name", "uuid", "type", "used_memory", *families)
    )
    for node, uuid, card_type, granted, *measured in rows:
        values = [node, uuid, card_type]
        for family, value in zip(families.values(), measured, strict=True):
            if value is not None:
                family.add_metric(values, value * MIB if family is families["observed_memory"] else value)
        beyond = Card(used_memory=granted, observed_memory=measured[0]).memory_overuse
        if beyond:
            overused += 1
            overuse.add_metric(values, beyond * MIB)
    count = GaugeMetricFamily(
        "hamiadmin_cards_memory_overused",
        "Cards using more memory than their tenants were granted (flagged on the node page).",
    )
    count.add_metric([], overused)
    return [*families.values(), overuse, count]


#: Collectors of state read on each scrape. Readers that live above ops (the queue tree of
#: `scheduling.services.batch`) register theirs from `SchedulingConfig.ready`.
CLUSTER_STATE = CollectorRegistry(auto_describe=False)
CLUSTER_STATE.register(ClusterStateCollector())


def exposition() -> bytes:
    """This process's event series and the cluster state, in the Prometheus text format."""
    return generate_latest(REGISTRY) + generate_latest(CLUSTER_STATE)


def metrics_token_problem(request) -> tuple[int, str] | None:
    """None when the scrape may proceed, else (status, why not).

    With HAMI_METRICS_TOKEN set, the scrape needs `Authorization: Bearer <token>` (401). Without
    one, /metrics is open in development and closed in production (403): there it is served
    behind a token only."""
    expected = str(settings.HAMIADMIN.get("METRICS_TOKEN") or "")
    if not expected:
        if getattr(settings, "PRODUCTION", False):
            return 403, "metrics need a token in production: set HAMI_METRICS_TOKEN"
        return None
    header = request.headers.get("Authorization", "")
    presented = header[7:].strip() if header[:7].lower() == "bearer " else ""
    if presented and hmac.compare_digest(presented.encode(), expected.encode()):
        return None
    return 401, "missing or wrong metrics token (Authorization: Bearer)"


def metrics_view(request):
    """GET /metrics: open in development unless HAMI_METRICS_TOKEN is set; behind it in production."""
    if request.method not in ("GET", "HEAD"):
        return HttpResponseNotAllowed(["GET", "HEAD"])
    problem = metrics_token_problem(request)
    if problem:
        code, why = problem
        response = HttpResponse(why + "\n", status=code, content_type="text/plain; charset=utf-8")
        if code == 401:
            response["WWW-Authenticate"] = 'Bearer realm="metrics"'
        return response
    response = HttpResponse(exposition(), content_type=CONTENT_TYPE)
    response["Cache-Control"] = "no-store"
    return response
