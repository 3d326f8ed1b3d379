"""Kubernetes against the database: the two kinds of drift only the API server's pods can
show (`scheduling.pipeline.consistency`: `unknown_bound_pod`, `vanished_pod`).

The pipeline never talks to Kubernetes; this module reads pods into a `KubernetesView`,
hands it to the check, and confirms each finding with a GET of that pod and a fresh read of
its row, so a pod caught between its watch event and its row's write (or a list older than
the row) is never called drift. Two callers:

- the kube agent (`DriftWatch`): on every resync against its informer's cache (a write
  that failed, e.g. a deletion seen while the database was down), and every
  `drift_list_seconds` against a fresh list (events the watch missed: the cache itself is
  wrong then). Confirmed vanished pods are released; unknown bound pods are reported;
- `manage.py check_consistency --kubernetes`, one-shot (`check_against`).
"""

from __future__ import annotations

import logging

from scheduling.engine.encoding import ALLOCATED
from scheduling.models import Pod
from scheduling.pipeline import consistency
from scheduling.pipeline.consistency import ConsistencyReport, KubernetesView, SeenPod
from scheduling.services.consistency import release_vanished

from . import pods as pod_objects
from .api import ApiError, KubeApi
from .events import ACTOR

log = logging.getLogger("hamiadmin.kube.reconcile")


def seen(obj: dict, scheduler_name: str | tuple[str, ...]) -> SeenPod | None:
    """The pod cut down to what the check compares; None when it has no usable name.
    `scheduler_name`: the one name served, or all of them (`HAMI_SCHEDULER_NAMES`)."""
    names = (scheduler_name,) if isinstance(scheduler_name, str) else scheduler_name
    namespace, name = pod_objects.key_of(obj)
    if not (isinstance(namespace, str) and isinstance(name, str) and namespace and name):
        return None
    node = pod_objects.node_of(obj)
    return SeenPod(
        namespace=namespace,
        name=name,
        uid=pod_objects.uid_of(obj),
        node=node if isinstance(node, str) else "",
        hami_bound=bool(
            node
            and pod_objects.scheduler_of(obj) in names
            and pod_objects.annotations_of(obj).get(ALLOCATED)
            and not pod_objects.final_status(obj)
        ),
    )


def view_of(objects: list[dict], scheduler_name: str | tuple[str, ...], every_pod: bool) -> KubernetesView:
    """`every_pod`: the list had no selector (extender mode, the command), so rows of both
    Kubernetes origins are covered; else only the scheduler name's pods (`kubernetes`)."""
    pods = tuple(pod for pod in (seen(obj, scheduler_name) for obj in objects) if pod is not None)
    origins = (Pod.KUBERNETES, Pod.EXTENDER) if every_pod else (Pod.KUBERNETES,)
    return KubernetesView(pods=pods, origins=origins)


def confirmed(
    api: KubeApi,
    found: ConsistencyReport,
    scheduler_name: str | tuple[str, ...],
    known: frozenset = frozenset(),
) -> ConsistencyReport:
    """`found`, keeping only the Kubernetes findings a GET of the pod and a fresh read of
    its row still show (a pod the API server cannot answer for is not called drift).
    Unknown bound pods in `known` ((pod, uid) confirmed before) are kept without a GET."""
    keep_unknown = [pod for pod in found.unknown_bound_pods if (pod["pod"], pod["uid"]) in known]
    keep_vanished = []
    to_confirm = [pod for pod in found.unknown_bound_pods if (pod["pod"], pod["uid"]) not in known]
    for finding in [*to_confirm, *found.vanished_pods]:
        namespace, name = Pod.split_key(finding["pod"])
        try:
            obj = api.get_pod(namespace, name)
        except ApiError as exc:
            if exc.status != 404:
                log.warning("pod %s not confirmed: %s", finding["pod"], exc)
                continue
            obj = None
        pods = () if obj is None else tuple(p for p in [seen(obj, scheduler_name)] if p is not None)
        view = KubernetesView(pods=pods, origins=(Pod.KUBERNETES, Pod.EXTENDER))
        if finding in found.unknown_bound_pods:
            keep_unknown += [
                pod for pod in consistency.unknown_bound_pods(view) if pod["uid"] == finding["uid"]
            ]
        else:
            keep_vanished += [
                pod
                for pod in consistency.vanished_pods(view, pod_ids=[finding["pod_id"]])
                if pod["uid"] == finding["uid"]
            ]
    found.unknown_bound_pods, found.vanished_pods = keep_unknown, keep_vanished
    return found


class DriftWatch:
    """The kube agent's comparison (see the module docstring): `run` with the informer's
    cache on each resync, or with a fresh list."""

    def __init__(
        self, api: KubeApi, scheduler_name: str | tuple[str, ...], every_pod: bool, repair: bool = True
    ):
        self.api, self.scheduler_name, self.every_pod, self.repair = api, scheduler_name, every_pod, repair
        #: Unknown bound pods confirmed by a GET already: not asked about again on each resync
        #: (after a migration from HAMi there may be hundreds, for as long as they run).
        self.known: frozenset[tuple[str, str]] = frozenset()

    def run(self, objects: list[dict]) -> ConsistencyReport:
        found = consistency.kubernetes_only(view_of(objects, self.scheduler_name, self.every_pod))
        if found.unknown_bound_pods or found.vanished_pods:
            found = confirmed(self.api, found, self.scheduler_name, self.known)
        self.known = frozenset((pod["pod"], pod["uid"]) for pod in found.unknown_bound_pods)
        consistency.report(found, actor=ACTOR)
        if self.repair and found.vanished_pods:
            released = release_vanished(found, actor=ACTOR)
            if released:
                log.warning(
                    "released %d pods Kubernetes no longer has: %s", len(released), ", ".join(released)
                )
        return found


def check_against(api: KubeApi, scheduler_name: str | tuple[str, ...]) -> ConsistencyReport:
    """The full check with every pod of the cluster compared, each finding confirmed."""
    objects, _ = api.list_pods()
    found = consistency.check(view_of(objects, scheduler_name, every_pod=True))
    if found.unknown_bound_pods or found.vanished_pods:
        found = confirmed(api, found, scheduler_name)
    return found
