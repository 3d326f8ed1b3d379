"""Gangs from owners: a pod's gang found from its top controller, as KAI's pod-grouper and
Kueue do, with no annotation written by hand (docs/queues.md, *Where jobs come from*).

Opt-in. `HAMI_GANGS_FROM_OWNERS=all` covers every namespace but one labelled
`hami.io/gangs-from-owners: "false"`; `none` (the default) only namespaces labelled `"true"`.
A pod that names a group itself (annotation, label, a Workload's scheduling group) keeps it.

The walk follows `metadata.ownerReferences` (the `controller: true` one) up through the kinds
registered in `OWNER_KINDS`, GETting each owner from the API server (cached `ttl` seconds),
until an owner has no controller or its kind is not registered. The topmost owner read
decides, through its kind's reader: how many members the gang needs (`Count`), or None (no
gang: each pod on its own, as for a Deployment without the inference opt-in). A pod whose
direct controller is of an unknown kind is a job of one pod.

Bad input is said, never guessed: an owner that is gone (404, or another object of that name
now), a cycle, two controllers, a count that is not a number raise `OwnerInvalid` naming the
object and the field; the agent refuses the pod until it changes, so a gang is never placed
with a member counted that cannot be read. No answer from the API server: `OwnerUnavailable`
(the pod is tried again at the next resync).

Subgroups (a JobSet's replicated jobs, an LWS group's leader and workers, a PyTorchJob's
replica types, a RayCluster's head and worker groups) are recorded on the group with their
own minimum, and the engine holds each to it (`engine.batch.jobs.Gang.subgroups`; a pod's
part is read from the labels its operator stamps, `engine.annotations.subgroup_of`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from scheduling.engine.annotations import NAME_LIMIT, GroupRef
from scheduling.storable import printable

from . import pods as pod_objects
from .api import ApiError, ApiUnavailable, KubeApi

log = logging.getLogger("hamiadmin.kube.owners")

#: The cluster-wide rule's values, and the namespace label that overrides it.
ALL, NONE = "all", "none"
NAMESPACE_LABEL = "hami.io/gangs-from-owners"
#: On a Deployment, StatefulSet or ReplicaSet: its replicas are one gang ("all replicas or none").
ALL_REPLICAS = "hami.io/all-replicas-or-none"
#: The LWS group a pod belongs to (one gang per group of `size` pods).
LWS_GROUP_INDEX = "leaderworkerset.sigs.k8s.io/group-index"
#: How many owners a walk follows before it calls the chain broken.
DEEPEST = 8
MAX_MEMBERS = 1_000_000


class OwnerInvalid(Exception):
    """An owner chain that cannot be read: `subject` names the object (`job/default/train`),
    `where` its field."""

    def __init__(self, subject: str, where: str, message: str):
        super().__init__(f"{subject}: {where}: {message}")
        self.subject, self.where, self.message = subject, where, message


class OwnerUnavailable(Exception):
    """The API server gave no answer about an owner: tried again later."""


@dataclass(frozen=True)
class Count:
    """What an owner says of its gang: members needed, its parts ((name, minimum) pairs),
    and `part` when the owner holds several gangs (an LWS group index)."""

    members: int
    subgroups: tuple[tuple[str, int], ...] = ()
    part: str = ""


Reader = Callable[[dict, dict], Count | None]


@dataclass(frozen=True)
class OwnerKind:
    group: str
    kind: str
    plural: str
    #: (owner, pod) -> its Count, or None: no gang. None: walked through, never decides.
    reader: Reader | None


#: (api group, kind) -> how that owner is read. `register` adds one.
OWNER_KINDS: dict[tuple[str, str], OwnerKind] = {}


def register(group: str, kind: str, plural: str, reader: Reader | None = None) -> None:
    OWNER_KINDS[(group, kind)] = OwnerKind(group, kind, plural, reader)


# -- reading counts -------------------------------------------------------------------


def _field(obj: dict, path: str, default=None):
    value: object = obj
    for part in path.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return default if value is None else value


def _whole(owner: dict, path: str, default: int | None, least: int = 0, inside=None, at: str = "") -> int:
    """A count at `path` of `owner` (or of `inside`, a part of it found at `at`): a whole
    number from `least`, else OwnerInvalid naming the owner and the field."""
    value = _field(owner if inside is None else inside, path, default)
    if isinstance(value, bool) or not isinstance(value, int) or not least <= value <= MAX_MEMBERS:
        where = f"{at}.{path}" if at else path
        raise OwnerInvalid(
            subject_of(owner), where, f"must be a whole number from {least} to {MAX_MEMBERS}, got {value!r}"
        )
    return value


def _parts(owner: dict, path: str) -> list[tuple[str, dict]]:
    """The objects of a list field, each with where it is (`spec.replicatedJobs[0]`)."""
    value = _field(owner, path, [])
    if not isinstance(value, list):
        raise OwnerInvalid(subject_of(owner), path, "must be a list")
    for i, part in enumerate(value):
        if not isinstance(part, dict):
            raise OwnerInvalid(subject_of(owner), f"{path}[{i}]", "must be an object")
    return [(f"{path}[{i}]", part) for i, part in enumerate(value)]


def _gang(members: int, subgroups=()) -> Count | None:
    """A gang of `members`, or None when there is nothing to wait for together (0 or 1)."""
    return Count(members, tuple(subgroups)) if members > 1 else None


def job_parallelism(owner: dict, spec: dict | None = None, at: str = "spec") -> int:
    """A batch Job's pods at once: `parallelism` (default 1), capped by `completions`."""
    spec = spec if spec is not None else _field(owner, "spec", {})
    spec = spec if isinstance(spec, dict) else {}
    parallelism = _whole(owner, "parallelism", 1, inside=spec, at=at)
    if spec.get("completions") is None:
        return parallelism
    return min(parallelism, _whole(owner, "completions", None, inside=spec, at=at))


def read_job(job: dict, pod: dict) -> Count | None:
    return _gang(job_parallelism(job))


def read_jobset(jobset: dict, pod: dict) -> Count | None:
    """Every replicated job's `replicas` x its Job template's parallelism; each replicated job
    a subgroup."""
    parts = []
    for at, replicated in _parts(jobset, "spec.replicatedJobs"):
        replicas = _whole(jobset, "replicas", 1, inside=replicated, at=at)
        spec = _field(replicated, "template.spec", {})
        each = job_parallelism(jobset, spec if isinstance(spec, dict) else {}, f"{at}.template.spec")
        parts.append((str(replicated.get("name") or at), replicas * each))
    return _gang(sum(least for _, least in parts), parts)


def read_leaderworkerset(lws: dict, pod: dict) -> Count | None:
    """One gang per LWS group (the pod's `group-index` label): its leader and `size - 1`
    workers (`leaderWorkerTemplate.size`)."""
    size = _whole(lws, "spec.leaderWorkerTemplate.size", 1, least=1)
    labels = pod_objects.meta(pod).get("labels")
    index = labels.get(LWS_GROUP_INDEX) if isinstance(labels, dict) else None
    if size < 2:
        return None
    return Count(size, (("leader", 1), ("workers", size - 1)), index if isinstance(index, str) else "0")


def read_raycluster(cluster: dict, pod: dict, at: str = "spec") -> Count | None:
    """The head and every worker group: `replicas` x `numOfHosts`, or with the autoscaler on
    (`enableInTreeAutoscaling`) `minReplicas` x `numOfHosts`, the least it starts with."""
    autoscaled = _field(cluster, f"{at}.enableInTreeAutoscaling") is True
    parts = [("head", 1)]
    for where, group in _parts(cluster, f"{at}.workerGroupSpecs"):
        replicas = _whole(cluster, "minReplicas" if autoscaled else "replicas", 0, inside=group, at=where)
        hosts = _whole(cluster, "numOfHosts", 1, least=1, inside=group, at=where)
        parts.append((str(group.get("groupName") or where), replicas * hosts))
    return _gang(sum(least for _, least in parts), parts)


def read_rayjob(job: dict, pod: dict) -> Count | None:
    return read_raycluster(job, pod, "spec.rayClusterSpec")


def replica_specs(field: str) -> Reader:
    """A Kubeflow training job: the sum of its replica specs' `replicas`, each a subgroup
    needing all of its own; or `runPolicy.schedulingPolicy.minAvailable` when set: then every
    replica type but `Worker` (master, chief, launcher, PS) still needs all of its replicas,
    and the workers the rest of minAvailable, so a job never starts without its master."""

    def read(job: dict, pod: dict) -> Count | None:
        specs = _field(job, f"spec.{field}", {})
        if not isinstance(specs, dict):
            raise OwnerInvalid(subject_of(job), f"spec.{field}", "must be an object of replica specs")
        parts = [
            (str(role), _whole(job, "replicas", 1, inside=replica, at=f"spec.{field}.{role}"))
            for role, replica in specs.items()
        ]
        if _field(job, "spec.runPolicy.schedulingPolicy.minAvailable") is not None:
            least = _whole(job, "spec.runPolicy.schedulingPolicy.minAvailable", None, 1)
            others = sum(n for role, n in parts if role.lower() != "worker")
            parts = [
                (role, n if role.lower() != "worker" else min(n, max(0, least - others))) for role, n in parts
            ]
            return _gang(max(least, sum(n for _, n in parts)), parts)
        return _gang(sum(n for _, n in parts), parts)

    return read


def read_replicas(workload: dict, pod: dict) -> Count | None:
    """A Deployment, StatefulSet or ReplicaSet is a gang only with `hami.io/all-replicas-or-none:
    "true"` on it (inference: all replicas or none); then its `replicas` (default 1)."""
    annotations = pod_objects.meta(workload).get("annotations")
    if not isinstance(annotations, dict) or str(annotations.get(ALL_REPLICAS, "")).lower() != "true":
        return None
    return _gang(_whole(workload, "spec.replicas", 1))


register("", "Pod", "pods")  # an LWS group's leader pod owns its workers' StatefulSet
register("apps", "ReplicaSet", "replicasets", read_replicas)
register("apps", "Deployment", "deployments", read_replicas)
register("apps", "StatefulSet", "statefulsets", read_replicas)
register("batch", "Job", "jobs", read_job)
register("jobset.x-k8s.io", "JobSet", "jobsets", read_jobset)
register("leaderworkerset.x-k8s.io", "LeaderWorkerSet", "leaderworkersets", read_leaderworkerset)
register("ray.io", "RayCluster", "rayclusters", read_raycluster)
register("ray.io", "RayJob", "rayjobs", read_rayjob)
register("kubeflow.org", "PyTorchJob", "pytorchjobs", replica_specs("pytorchReplicaSpecs"))
register("kubeflow.org", "TFJob", "tfjobs", replica_specs("tfReplicaSpecs"))
register("kubeflow.org", "MPIJob", "mpijobs", replica_specs("mpiReplicaSpecs"))


# -- the walk -------------------------------------------------------------------------


def subject_of(obj: dict) -> str:
    """`<kind>/<namespace>/<name>`, as the refusal names the object."""
    metadata = pod_objects.meta(obj)
    found = obj.get("kind")
    kind = found if isinstance(found, str) and found else "object"
    return printable(f"{kind.lower()}/{metadata.get('namespace') or 'default'}/{metadata.get('name') or ''}")


def controller_of(obj: dict) -> tuple[int, dict] | None:
    """The object's controller reference (`controller: true`) and its position, or None.
    Two controllers: OwnerInvalid (Kubernetes allows one)."""
    found = pod_objects.meta(obj).get("ownerReferences")
    controllers = [
        (i, ref)
        for i, ref in enumerate(found if isinstance(found, list) else [])
        if isinstance(ref, dict) and ref.get("controller") is True
    ]
    if len(controllers) > 1:
        names = ", ".join(f"{ref.get('kind')}/{ref.get('name')}" for _, ref in controllers)
        raise OwnerInvalid(subject_of(obj), "metadata.ownerReferences", f"two controllers claim it: {names}")
    return controllers[0] if controllers else None


def gang_name(kind: str, name: str, uid: str, part: str = "") -> str:
    """`<kind>-<name>[-<part>]` (`jobset-train`, `leaderworkerset-serve-0`); `<kind>-<uid>` when
    that would be longer than a group name may be."""
    name = f"{kind.lower()}-{name}" + (f"-{part}" if part else "")
    return name if len(name) <= NAME_LIMIT else f"{kind.lower()}-{uid}"[:NAME_LIMIT]


class OwnerGangs:
    """The agent's gang finder (`gang_of`): the rule, the walk and a cache of what it GETs."""

    def __init__(
        self,
        api: KubeApi,
        rule: str = NONE,
        ttl: float = 30.0,
        clock=time.monotonic,
        on_unknown: Callable[[dict, str], None] | None = None,
    ):
        if rule not in (ALL, NONE):
            raise ValueError(f"HAMI_GANGS_FROM_OWNERS must be {ALL} or {NONE}, got {rule!r}")
        self.api, self.rule, self.ttl, self.clock = api, rule, ttl, clock
        #: told (pod, why) when the pod's own controller is of a kind no gang is read from
        self.on_unknown = on_unknown or (lambda pod, why: None)
        self.lock = threading.Lock()
        self.cache: dict[tuple, tuple[float, dict]] = {}

    def gang_of(self, pod: dict) -> GroupRef | None:
        """The pod's gang from its top controller, or None (rule off in its namespace, no
        controller, an unknown kind, or a top owner that makes no gang). Raises OwnerInvalid,
        OwnerUnavailable."""
        namespace = pod_objects.meta(pod).get("namespace") or "default"
        if not self.applies(namespace):
            return None
        chain: list[tuple[OwnerKind, dict]] = []
        seen = {pod_objects.uid_of(pod) or subject_of(pod)}
        current = pod
        for _ in range(DEEPEST):
            found = controller_of(current)
            if found is None:
                break
            position, ref = found
            group = str(ref.get("apiVersion") or "").rpartition("/")[0]
            kind = OWNER_KINDS.get((group, str(ref.get("kind") or "")))
            where = f"metadata.ownerReferences[{position}]"
            if kind is None:
                if current is pod:
                    self.on_unknown(
                        pod,
                        f"{subject_of(pod)}: {where}.kind: {printable(str(ref.get('kind')))} "
                        f"({printable(group) or 'core'}) is not a kind gangs are read from; "
                        "the pod is a job of its own",
                    )
                break
            uid = ref.get("uid") or f"{ref.get('kind')}/{ref.get('name')}"
            if uid in seen:
                raise OwnerInvalid(
                    subject_of(current),
                    where,
                    f"{ref.get('kind')} {ref.get('name')!r} closes a cycle of owners",
                )
            seen.add(uid)
            current = self.owner(kind, ref, namespace, subject_of(current), where)
            chain.append((kind, current))
        else:
            raise OwnerInvalid(
                subject_of(current), "metadata.ownerReferences", f"more than {DEEPEST} owners deep"
            )
        deciding = [(kind, obj) for kind, obj in chain if kind.reader is not None]
        if not deciding:
            return None
        kind, top = deciding[-1]
        assert kind.reader is not None
        count = kind.reader(top, pod)
        if count is None:
            return None
        metadata = pod_objects.meta(top)
        name = str(metadata.get("name") or "")
        return GroupRef(
            name=gang_name(kind.kind, name, str(metadata.get("uid") or ""), count.part),
            source="owner",
            min_member=count.members,
            owner_kind=kind.kind,
            owner_name=name,
            subgroups=count.subgroups,
        )

    def owner(self, kind: OwnerKind, ref: dict, namespace: str, subject: str, where: str) -> dict:
        """The owner `ref` names, cached; OwnerInvalid when it is gone or another object holds
        its name now (its uid differs)."""
        version = str(ref.get("apiVersion") or "").rpartition("/")[2]
        name = str(ref.get("name") or "")
        key = (kind.group, kind.plural, namespace, name)
        obj = self._cached(key)
        if obj is None:
            try:
                if kind.plural == "pods":
                    obj = self.api.get_pod(namespace, name)
                else:
                    obj = getattr(self.api, f"get_{kind.plural}")(kind.group, version, namespace, name)
            except ApiUnavailable as exc:
                raise OwnerUnavailable(f"{subject}: {where}: {exc}") from exc
            except ApiError as exc:
                said = f"not found ({exc.message or exc.reason})" if exc.status == 404 else str(exc)
                raise OwnerInvalid(subject, where, f"{kind.kind} {name!r}: {said}") from None
            obj.setdefault("kind", kind.kind)
            self._keep(key, obj)
        uid = ref.get("uid")
        if uid and pod_objects.uid_of(obj) and uid != pod_objects.uid_of(obj):
            raise OwnerInvalid(
                subject, where, f"{kind.kind} {name!r} is another object now (uid {uid} is gone)"
            )
        return obj

    def applies(self, namespace: str) -> bool:
        """The rule in this namespace: its label, else the cluster-wide setting."""
        key = ("", "namespaces", "", namespace)
        obj = self._cached(key)
        if obj is None:
            try:
                obj = self.api.get_namespace(namespace)
            except (ApiError, ApiUnavailable) as exc:
                log.warning(
                    "namespace %s not read (%s); HAMI_GANGS_FROM_OWNERS=%s holds", namespace, exc, self.rule
                )
                obj = {}
            self._keep(key, obj)
        labels = pod_objects.meta(obj).get("labels")
        said = labels.get(NAMESPACE_LABEL) if isinstance(labels, dict) else None
        if isinstance(said, str) and said.strip().lower() in ("true", "false"):
            return said.strip().lower() == "true"
        return self.rule == ALL

    def _cached(self, key: tuple) -> dict | None:
        with self.lock:
            found = self.cache.get(key)
        return found[1] if found and found[0] > self.clock() else None

    def _keep(self, key: tuple, obj: dict) -> None:
        with self.lock:
            if len(self.cache) > 10_000:
                self.cache.clear()
            self.cache[key] = (self.clock() + self.ttl, obj)
