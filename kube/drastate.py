"""Dynamic Resource Allocation through the scheduling cycle: DRA devices as cards, claims as asks.

The agent (watcher mode, `HAMI_DRA`) watches `resource.k8s.io/v1` ResourceSlices,
DeviceClasses, DeviceTaintRules and ResourceClaims (`DraSync`, one informer each). `DraState`
reads them:

- `node_report(name)`: the node's devices of our drivers (complete pools only), as the cards
  `services.report_inventory` stores, of mode `dra` (`engine.families.dra`) with `Card.dra`
  naming the driver, pool and device the allocation result will name.
- `asks(pod)`: the pod's claims as the submission stores them (`kube.pods.submission`): one
  container per request asking the DRA family's resources (count, MiB, cores), the devices
  its class and request selectors accept and whose taints it tolerates as the pod's
  `nvidia.com/use-gpuuuid`, the node of a claim allocated already as `nodeName`, and
  `resourceClaims` saying which container is which request. A pod whose claims cannot be
  asked for yet is stored with `resourceClaims.hold` (the code and words of
  `engine.dra.claims.REASON_WORDS`): it waits, not tried (`engine.claimhold`), until a
  change here submits it again.

The cycle then decides, gangs, queues, quotas, preemption and the commit's re-check
included, and the binder writes the claims' status before the Binding (`kube.binder`).

KEP-5004, extended resources backed by DRA (`extended(pod)`): a container asking an extended
resource (`nvidia.com/gpu: 1`) that a DeviceClass maps, by its `spec.extendedResourceName` or
the implicit `deviceclass.resource.kubernetes.io/<class>`, asks as a claim's request would:
one DRA-family container per container and resource, `count` its quantity, the candidates
the class accepts, named `container-<i>-request-<j>` as kube-scheduler names the requests of
the special ResourceClaim it creates (i: the index in initContainers + containers, j: the
resource's index in the container's sorted requests). The rule: with `HAMI_DRA`, a mapping
of a class whose selectors accept a device of our drivers wins in the whole cluster, the
resource is taken from the stored containers and the pod is a DRA pod; kube-scheduler decides
per node (a node advertising the resource in `allocatable` serves it by device plugin), which
one family per pod cannot, and HAMi runs DRA and device-plugin modes in different clusters.
HAMi's `nvidia.com/gpumem` and `nvidia.com/gpucores` beside a mapped count become the
request's `capacity.requests` (memory in MiB, cores in percent), as HAMi-DRA's webhook
writes them in a claim, so such pods share a device; kube-scheduler's special claim asks only
the count. The scheduling fields say `resourceClaims.extended` (the requests and the pod's
`requestMappings`); the binder creates the claim (`kube.draclaims`). Such a pod never goes to
the DRA pass, which places no extended resources: what it would take waits, held
(`DraUnsupported`).

What one decision cannot say is left to the DRA pass (`kube.dra`): a request with several
`firstAvailable` subrequests, `matchAttribute`/`distinctAttribute` constraints, requests of
one pod that select different devices, devices that draw on shared counters (partitions),
a pod that only joins claims allocated already, and a claim of the pod's Workload API
PodGroup (KEP-5729, `PodGroupsSeen`). `asks` marks such a pod `PASS`; the
watcher does not queue it, and the pass places it.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Callable

from hamiadmin.hamiconfig import current as hami_config
from scheduling.engine.annotations import USE_UUID
from scheduling.engine.dra.allocate import group_claims, podgroup_name
from scheduling.engine.dra.cel import CelError, Selectors
from scheduling.engine.dra.claims import (
    DRA_UNSUPPORTED,
    POOL_INCOMPLETE,
    REASON_WORDS,
    SELECTOR_MISMATCH,
    DraUnsupported,
    PodClaims,
    claim_names,
    read_claims,
)
from scheduling.engine.dra.inventory import DEFAULT_DRIVERS, Inventory, read_inventory
from scheduling.engine.families import DRA
from scheduling.engine.families.dra import MODE
from scheduling.engine.quantity import parse
from scheduling.engine.requests import GPU, GPUCORES, GPUMEM, GPUMEM_PERCENTAGE

from . import pods as pod_objects
from .informer import Handler, cache_key

log = logging.getLogger("hamiadmin.kube.drastate")

#: `asks(pod)["path"]`: the cycle places it, or the DRA pass does; NONE: the pod asks nothing
#: through DRA (no claims, no extended resource a class maps).
CYCLE, PASS, NONE = "cycle", "pass", "none"
#: The special claim of a pod's extended resources until the binder creates it: kube-scheduler's
#: in-memory name, not a valid object name, so it never meets a real claim.
EXTENDED_CLAIM = "<extended-resources>"
#: The implicit extended resource name of every DeviceClass: this prefix and the class's name.
CLASS_PREFIX = "deviceclass.resource.kubernetes.io/"
#: Pods whose asks are kept (by uid, resourceVersion and the state's version).
_ASKS_KEPT = 4096


def hold_words(code: str, message: str) -> str:
    """`<what it means>: <details>. <hint>` for a DRA reason code (`REASON_WORDS`)."""
    words, hint = REASON_WORDS.get(code, ("", ""))
    return f"{words + ': ' if words else ''}{message}{'. ' + hint if hint else ''}"


class _Lookup:
    """`dict.get`-like access to an informer's cache, as `read_claims` reads claims and classes."""

    def __init__(self, get: Callable[[str, str], dict | None], namespaced: bool):
        self._get, self._namespaced = get, namespaced

    def get(self, key, default=None):
        if self._namespaced:
            namespace, name = key
            found = self._get(namespace, name)
        else:
            found = self._get("", key)
        return default if found is None else found


class _Unreserved:
    """The claims as the pod's asks read them: one allocated for this pod alone (by our bind,
    before its Binding) reads as not allocated, so the pod asks as it did when it was placed
    and its stored spec does not change under the bind."""

    def __init__(self, claims: _Lookup, uid: str):
        self.claims, self.uid = claims, uid

    def get(self, key, default=None):
        found = self.claims.get(key)
        if found is None:
            return default
        status = found.get("status") if isinstance(found.get("status"), dict) else {}
        reserved = status.get("reservedFor") or []
        if (
            self.uid
            and status.get("allocation")
            and reserved
            and all(isinstance(r, dict) and r.get("uid") == self.uid for r in reserved)
        ):
            return {
                **found,
                "status": {k: v for k, v in status.items() if k not in ("allocation", "reservedFor")},
            }
        return found


class DraState:
    """What the DRA informers hold, read as cards and asks (see the module docstring)."""

    def __init__(
        self,
        slices: Callable[[], list[dict]],
        rules: Callable[[], list[dict]],
        get_class: Callable[[str, str], dict | None],
        get_claim: Callable[[str, str], dict | None],
        drivers: tuple[str, ...] = DEFAULT_DRIVERS,
        list_classes: Callable[[], list[dict]] | None = None,
    ):
        self._slices, self._rules = slices, rules
        #: every DeviceClass (for the extended resources they map); None: none is mapped
        self._list_classes = list_classes
        self.classes = _Lookup(get_class, namespaced=False)
        self.claims = _Lookup(get_claim, namespaced=True)
        self.drivers = tuple(drivers)
        self.lock = threading.RLock()
        self.selectors = Selectors()
        #: moves on every change of a slice, rule, class or claim: what the kept asks depend on
        self.version = 0
        self._inventory: tuple[int, Inventory] | None = None
        self._mapping: tuple[int, dict[str, str]] | None = None
        self._served: tuple[tuple, dict[tuple[str, str], bool]] = ((), {})
        self._asks: OrderedDict[tuple, dict] = OrderedDict()
        #: the claims several waiting pods name (`ClaimSharers`, set by the agent)
        self.sharers: ClaimSharers | None = None
        #: a Workload API PodGroup by (namespace, name), None when not read (the agent's
        #: informer, `PodGroupsSeen`): its `spec.resourceClaims` are its gang's (KEP-5729)
        self.podgroups: Callable[[str, str], dict | None] = lambda namespace, name: None

    def changed(self) -> None:
        with self.lock:
            self.version += 1

    def inventory(self) -> Inventory:
        with self.lock:
            if self._inventory is None or self._inventory[0] != self.version:
                self._inventory = (self.version, read_inventory(self._slices(), self.drivers, self._rules()))
            return self._inventory[1]

    # -- cards ----------------------------------------------------------------------------

    def node_names(self) -> set[str]:
        return {device.node for device in self.inventory().devices}

    def node_report(self, name: str) -> tuple[list[dict], dict[str, dict]]:
        """The node's DRA devices as report devices, and each card's `Card.dra` by UUID."""
        devices, marks = [], {}
        for device in self.inventory().devices:
            if device.node != name:
                continue
            devices.append(
                {
                    "uuid": device.uuid,
                    "index": device.index,
                    "type": device.type[:128],
                    "slots": device.slots,
                    "memory": device.memory,
                    "cores": device.cores,
                    "numa": max(device.numa, 0),
                    "health": True,
                    "mode": MODE,
                }
            )
            marks[device.uuid] = {
                "driver": device.driver,
                "pool": device.pool,
                "device": device.name,
                "shareable": device.shareable,
                "capacity": sorted(key for domain, key in device.capacity if domain == device.driver),
                "taints": len(device.taints),
                "counters": device.partition,
            }
        return devices, marks

    # -- extended resources (KEP-5004) -----------------------------------------------------

    def mapping(self) -> dict[str, str]:
        """Extended resource name -> the DeviceClass that backs it, for the classes whose
        selectors accept a device of our drivers. kube-scheduler's rule: every class maps its
        implicit `deviceclass.resource.kubernetes.io/<name>`; of the classes naming one
        `extendedResourceName`, the newest (`creationTimestamp`) wins, then the first by name."""
        with self.lock:
            if self._mapping is not None and self._mapping[0] == self.version:
                return self._mapping[1]
            classes = [c for c in (self._list_classes() if self._list_classes else []) if isinstance(c, dict)]
            chosen: dict[str, dict] = {}
            for found in classes:
                name = str(pod_objects.meta(found).get("name") or "")
                if name:
                    chosen[CLASS_PREFIX + name] = found
            explicit: dict[str, list[dict]] = {}
            for found in classes:
                named = pod_objects.as_dict(found.get("spec")).get("extendedResourceName")
                if isinstance(named, str) and named:
                    explicit.setdefault(named, []).append(found)
            for named, candidates in explicit.items():
                candidates.sort(key=lambda c: str(pod_objects.meta(c).get("name") or ""))
                candidates.sort(
                    key=lambda c: str(pod_objects.meta(c).get("creationTimestamp") or ""), reverse=True
                )
                chosen[named] = candidates[0]
            # whether a class serves our devices changes with the class or the slices only, not
            # with the claims that move `version` most often: kept until one of them changes
            devices = tuple(
                (str(pod_objects.meta(x).get("name")), str(pod_objects.meta(x).get("resourceVersion")))
                for x in self._slices()
            )
            if devices != self._served[0]:
                self._served = (devices, {})
            served = self._served[1]
            ours = {}
            for resource, found in chosen.items():
                meta = pod_objects.meta(found)
                key = (str(meta.get("name")), str(meta.get("resourceVersion")))
                if key not in served:
                    served[key] = self._serves(found)
                if served[key]:
                    ours[resource] = key[0]
            self._mapping = (self.version, ours)
            return ours

    def _serves(self, device_class: dict) -> bool:
        """Whether the class's selectors accept a device of our drivers (a class of another
        driver, or one no device of ours matches, maps nothing here)."""
        selectors = pod_objects.as_dict(device_class.get("spec")).get("selectors") or []
        expressions = [
            str(e)
            for s in selectors
            if (e := pod_objects.as_dict(pod_objects.as_dict(s).get("cel")).get("expression"))
        ]
        for device in self.inventory().devices:
            try:
                if all(self.selectors.matches(e, device) for e in expressions):
                    return True
            except CelError:
                return False
        return False

    def extended(self, pod: dict) -> list[dict]:
        """The pod's container requests of extended resources a class of ours maps, in the
        order of the special claim's requests (by name, as kube-scheduler sorts them): each
        `{index, container, resource, request, class, count, memory, cores, percentage}`,
        memory in MiB and cores in percent or None; `percentage`: HAMi's
        `gpumem-percentage` is asked too (the pod is held: a device's share is asked in MiB)."""
        mapping = self.mapping()
        if not mapping:
            return []
        config = hami_config()
        written = config.resources.as_written()
        containers = [
            c
            for key in ("initContainers", "containers")
            for c in (pod_objects.spec(pod).get(key) or [])
            if isinstance(pod_objects.spec(pod).get(key), list)
        ]
        found = []
        for index, container in enumerate(containers):
            resources = pod_objects.as_dict(pod_objects.as_dict(container).get("resources"))
            asked = {
                **pod_objects.as_dict(resources.get("limits")),
                **pod_objects.as_dict(resources.get("requests")),
            }
            names = sorted(str(name) for name in asked)
            for resource in names:
                if resource not in mapping:
                    continue
                count = _whole(asked[resource])
                if not count:
                    continue
                memory = cores = None
                percentage = resource == written[GPU] and written[GPUMEM_PERCENTAGE] in asked
                if resource == written[GPU]:
                    memory = _whole(asked.get(written[GPUMEM]))
                    if memory is not None:
                        memory *= max(config.memory_factor, 1)
                    cores = _whole(asked.get(written[GPUCORES]))
                found.append(
                    {
                        "index": index,
                        "container": str(pod_objects.as_dict(container).get("name") or ""),
                        "resource": resource,
                        "request": f"container-{index}-request-{names.index(resource)}",
                        "class": mapping[resource],
                        "count": count,
                        "memory": memory,
                        "cores": cores,
                        "percentage": percentage,
                    }
                )
        found.sort(key=lambda entry: str(entry["request"]))
        return found

    # -- asks -----------------------------------------------------------------------------

    def asks(self, pod: dict) -> dict:
        """The pod's claims (and extended resources a class maps) as the submission stores
        them: `path` (CYCLE, PASS, or NONE for a pod asking nothing through DRA), and for the
        cycle `containers` to add, `annotations` to add, the `scheduling` fields
        (`resourceClaims`, and `nodeName` when an allocated claim pins it), and `strip`, the
        extended resources its own containers no longer ask."""
        meta = pod_objects.meta(pod)
        key = (meta.get("uid"), meta.get("resourceVersion"), pod_objects.key_of(pod))
        with self.lock:
            kept = self._asks.get((*key, self.version))
            if kept is not None:
                return kept
            found = self._read(pod)
            self._asks[(*key, self.version)] = found
            while len(self._asks) > _ASKS_KEPT:
                self._asks.popitem(last=False)
            return found

    def _read(self, pod: dict) -> dict:
        """`_asked`, and for a pod with extended resources backed by DRA, `strip`: the
        resource names `kube.pods.submission` takes from its containers (the DRA-family
        containers ask for them), placed or held."""
        extended = self.extended(pod)
        found = self._asked(pod, extended)
        if extended and found.get("path") == CYCLE:
            found["strip"] = sorted({e["resource"] for e in extended} | _capacity_names(extended))
        return found

    def _asked(self, pod: dict, extended: list[dict]) -> dict:
        named = {}
        claims = _Unreserved(self.claims, str(pod_objects.meta(pod).get("uid") or ""))
        try:
            if not extended and not pod_objects.spec(pod).get("resourceClaims"):
                return {"path": NONE}
            named = dict(claim_names(pod))
            asked = (
                read_claims(pod, claims, self.classes, self.inventory(), self.selectors)
                if named
                else PodClaims()
            )
            if extended:
                for entry in extended:
                    if entry["percentage"]:
                        raise DraUnsupported(
                            DRA_UNSUPPORTED,
                            f"container {entry['container']}: a share of a DRA device's memory is asked in "
                            "MiB (nvidia.com/gpumem), not as a percentage",
                        )
                special = _special_claim(pod, extended)
                stand_in = {
                    "metadata": pod_objects.meta(pod),
                    "spec": {
                        "resourceClaims": [{"name": EXTENDED_CLAIM, "resourceClaimName": EXTENDED_CLAIM}]
                    },
                }
                namespace = pod_objects.key_of(pod)[0]
                more = read_claims(
                    stand_in,
                    {(namespace, EXTENDED_CLAIM): special},
                    self.classes,
                    self.inventory(),
                    self.selectors,
                )
                asked.asks += more.asks
                asked.claims.update(more.claims)
        except DraUnsupported as exc:
            return _held(named, exc.code, exc.message)
        except Exception as exc:  # noqa: BLE001 - a claim we cannot read holds its pod, said
            log.warning("pod %s: claims not read: %s", pod_objects.subject_of(pod), exc)
            return _held(named, DRA_UNSUPPORTED, f"the claims could not be read: {exc}")
        why = self._why_pass(asked) or self._shared(pod, named) or self._group_claim(pod)
        if why and extended:  # the DRA pass places no extended resources: the pod waits, said
            return _held(named, DRA_UNSUPPORTED, f"with extended resources backed by DRA, {why}")
        if why:
            return {"path": PASS, "why": why}
        for ask in asked.asks:
            alternative = ask.alternatives[0]
            if not alternative.candidates:
                return _held(named, *self._why_none(ask.claim, alternative))
        found = self._for_cycle(pod, named, asked)
        if extended:
            found["scheduling"]["resourceClaims"]["extended"] = {
                "requests": asked.claims[EXTENDED_CLAIM]["spec"]["devices"]["requests"],
                "requestMappings": [
                    {
                        "containerName": e["container"],
                        "resourceName": e["resource"],
                        "requestName": e["request"],
                    }
                    for e in sorted(extended, key=lambda e: (e["index"], e["resource"]))
                ],
            }
        return found

    def _shared(self, pod: dict, named: dict) -> str:
        """Why the pod goes to the pass for a claim other waiting pods name too ("" if none)."""
        if self.sharers is None:
            return ""
        namespace = pod_objects.key_of(pod)[0] or "default"
        for claim in named.values():
            if isinstance(claim, str) and self.sharers.shared(namespace, claim):
                return f"claim {claim} is named by several waiting pods: it is allocated once for them"
        return ""

    def _group_claim(self, pod: dict) -> str:
        """Why the pod goes to the pass for a claim of its Workload API PodGroup (KEP-5729):
        allocated once inside the gang's placement and reserved for the PodGroup, which one
        decision per pod cannot say. A PodGroup not read yet holds its pods in the cycle; once
        read, its members' asks are read again (`PodGroupsSeen`)."""
        name = podgroup_name(pod)
        podgroup = self.podgroups(pod_objects.key_of(pod)[0] or "default", name) if name else None
        shared = sorted(group_claims(pod, podgroup)) if podgroup is not None else []
        if shared:
            return f"claim {', '.join(shared)} is its PodGroup's: allocated once for the gang"
        return ""

    @staticmethod
    def _why_pass(asked: PodClaims) -> str:
        """Why the cycle cannot place these asks with one decision ("" when it can)."""
        if not asked.asks:
            return "it only joins claims allocated already"
        if any(len(ask.alternatives) > 1 for ask in asked.asks):
            return "a request has several firstAvailable subrequests"
        if any(found for found in asked.constraints.values()):
            return "a claim has matchAttribute or distinctAttribute constraints"
        candidates = [frozenset(d.uuid for d in ask.alternatives[0].candidates) for ask in asked.asks]
        if len(set(candidates)) > 1:
            return "the requests select different devices"
        if any(d.partition for ask in asked.asks for d in ask.alternatives[0].candidates):
            return "the devices draw on shared counters (partitions)"
        return ""

    def _why_none(self, claim: str, alternative) -> tuple[str, str]:
        inventory = self.inventory()
        if inventory.incomplete:
            pools = ", ".join(f"{k}: {v}" for k, v in sorted(inventory.incomplete.items()))
            return POOL_INCOMPLETE, f"request {alternative.request}: no device; {pools}"
        refused = alternative.refused
        code = max(refused, key=lambda c: (refused[c], c)) if refused else SELECTOR_MISMATCH
        counts = ", ".join(f"{n} {c}" for c, n in sorted(refused.items()))
        return (
            code,
            f"claim {claim} request {alternative.request}: no device fits ({counts or 'none published'})",
        )

    @staticmethod
    def _for_cycle(pod: dict, named: dict, asked: PodClaims) -> dict:
        names = DRA.resources
        containers, requests = [], []
        for ask in asked.asks:
            alternative = ask.alternatives[0]
            limits = {names.count: str(alternative.count)}
            if alternative.memory is not None:
                limits[names.memory] = str(alternative.memory)
            if alternative.cores is not None:
                limits[names.cores] = str(alternative.cores)
            container = f"{ask.claim}/{ask.request}"[:253]
            containers.append({"name": container, "resources": {"limits": limits}})
            requests.append({"container": container, "claim": ask.claim, "request": alternative.request})
        uuids = {d.uuid for ask in asked.asks for d in ask.alternatives[0].candidates}
        own = pod_objects.annotations_of(pod).get(USE_UUID)
        if isinstance(own, str) and own.strip():
            uuids &= {part.strip() for part in own.split(",")}
        scheduling: dict = {
            "resourceClaims": {
                "claims": [{"name": name, "claim": claim} for name, claim in named.items()],
                "requests": requests,
            }
        }
        if asked.node:
            scheduling["nodeName"] = asked.node
        return {
            "path": CYCLE,
            "containers": containers,
            # sorted: the same candidates give the same stored spec (and spec hash)
            "annotations": {USE_UUID: ",".join(sorted(uuids))},
            "scheduling": scheduling,
        }


def _whole(value) -> int | None:
    """A quantity that is a whole number (kube-scheduler's `AsInt64`), else None."""
    amount = parse(value)
    if amount is None or amount < 0 or amount != amount.to_integral_value():
        return None
    return int(amount)


def _capacity_names(extended: list[dict]) -> set[str]:
    """HAMi's memory and cores names, as written, when they became capacity requests (and a
    memory percentage, which holds the pod)."""
    written = hami_config().resources.as_written()
    found = set()
    for entry in extended:
        if entry["percentage"]:
            found.add(written[GPUMEM_PERCENTAGE])
        if entry["memory"] is not None:
            found.add(written[GPUMEM])
        if entry["cores"] is not None:
            found.add(written[GPUCORES])
    return found


def _special_claim(pod: dict, extended: list[dict]) -> dict:
    """The special ResourceClaim's spec as kube-scheduler writes it: one `ExactCount` request
    per container and resource, by name; with HAMi's memory and cores as capacity requests."""
    requests = []
    for entry in extended:
        exactly: dict = {
            "deviceClassName": entry["class"],
            "allocationMode": "ExactCount",
            "count": entry["count"],
        }
        capacity = {}
        if entry["memory"] is not None:
            capacity["memory"] = f"{entry['memory']}Mi"
        if entry["cores"] is not None:
            capacity["cores"] = str(entry["cores"])
        if capacity:
            exactly["capacity"] = {"requests": capacity}
        requests.append({"name": entry["request"], "exactly": exactly})
    namespace = pod_objects.key_of(pod)[0]
    return {
        "metadata": {"name": EXTENDED_CLAIM, "namespace": namespace},
        "spec": {"devices": {"requests": requests}},
    }


def _held(named: dict, code: str, message: str) -> dict:
    return {
        "path": CYCLE,
        "containers": [],
        "annotations": {},
        "scheduling": {
            "resourceClaims": {
                "claims": [{"name": name, "claim": claim} for name, claim in named.items()],
                "hold": {"reason": code, "message": hold_words(code, message)[:2000]},
            }
        },
    }


class DraSync(Handler):
    """One DRA informer's handler: any change moves the state's version and calls `on_change`
    with the resource and the object (None after a list or resync that changed something)."""

    def __init__(self, state: DraState, resource: str, on_change: Callable[[str, dict | None], None]):
        self.state, self.resource, self.on_change = state, resource, on_change
        self._seen: dict[tuple[str, str], str] = {}

    def changed(self, kind: str, obj: dict) -> None:
        self.state.changed()
        self.on_change(self.resource, obj)

    def synced(self, objects: list[dict], listed: bool) -> None:
        versions = {
            (
                str(pod_objects.meta(o).get("namespace") or ""),
                str(pod_objects.meta(o).get("name") or ""),
            ): str(pod_objects.meta(o).get("resourceVersion") or "")
            for o in objects
        }
        if versions != self._seen:
            self._seen = versions
            self.state.changed()
            self.on_change(self.resource, None)


def _named_claims(obj: dict) -> frozenset[tuple[str, str]]:
    """The claims a waiting pod names by object name (`resourceClaimName`); a template's claim
    is the pod's own, and an ended or bound pod waits for nothing."""
    spec = pod_objects.spec(obj)
    entries = spec.get("resourceClaims")
    if not isinstance(entries, list) or pod_objects.node_of(obj) or pod_objects.final_status(obj):
        return frozenset()
    namespace = str(pod_objects.meta(obj).get("namespace") or "default")
    return frozenset(
        (namespace, entry["resourceClaimName"])
        for entry in entries
        if isinstance(entry, dict) and isinstance(entry.get("resourceClaimName"), str)
    )


class ClaimSharers(Handler):
    """Which ResourceClaims several waiting pods of ours name (the pod informer's handler,
    called before the watcher's): such a claim is allocated once for all of them, which one
    decision per pod cannot say, so `DraState.asks` sends its pods to the DRA pass (a gang
    sharing one claim among them). When a claim gains or loses its second waiting pod the
    kept asks are read again (`DraState.changed`) and `on_change` submits the waiting pods."""

    def __init__(self, state: DraState, on_change: Callable[[str, dict | None], None]):
        self.state, self.on_change = state, on_change
        self.lock = threading.Lock()
        self._by_pod: dict[tuple[str, str], frozenset[tuple[str, str]]] = {}
        self._count: dict[tuple[str, str], int] = {}

    def shared(self, namespace: str, claim: str) -> bool:
        return self._count.get((namespace, claim), 0) > 1

    def _set(self, key: tuple[str, str], names: frozenset[tuple[str, str]]) -> bool:
        """Record the pod's claims; whether a claim crossed between one pod and several."""
        with self.lock:
            before = self._by_pod.get(key, frozenset())
            if before == names:
                return False
            if names:
                self._by_pod[key] = names
            else:
                self._by_pod.pop(key, None)
            crossed = False
            for claim, step in [*((c, -1) for c in before - names), *((c, 1) for c in names - before)]:
                old = self._count.get(claim, 0)
                new = old + step
                if new > 0:
                    self._count[claim] = new
                else:
                    self._count.pop(claim, None)
                crossed |= (old > 1) != (new > 1)
            return crossed

    def _crossed(self) -> None:
        self.state.changed()
        self.on_change("pods", None)

    def changed(self, kind: str, obj: dict) -> None:
        names = frozenset() if kind == "DELETED" else _named_claims(obj)
        if self._set(cache_key(obj), names):
            self._crossed()

    def synced(self, objects: list[dict], listed: bool) -> None:
        crossed = False
        seen = set()
        for obj in objects:
            key = cache_key(obj)
            seen.add(key)
            crossed |= self._set(key, _named_claims(obj))
        if listed:
            for key in set(self._by_pod) - seen:
                crossed |= self._set(key, frozenset())
        if crossed:
            self._crossed()


class PodGroupsSeen(Handler):
    """The Workload API PodGroups' informer, with `HAMI_DRA` (called before the group sync):
    a PodGroup's `spec.resourceClaims` say which of its members' claims are the gang's
    (`DraState._group_claim`), so any change reads the kept asks again and `on_change` submits
    the waiting pods. `state_of`: the agent's DRA state, None before its informers start."""

    def __init__(
        self, state_of: Callable[[], DraState | None], on_change: Callable[[str, dict | None], None]
    ):
        self.state_of, self.on_change = state_of, on_change

    def _seen(self, obj: dict | None) -> None:
        state = self.state_of()
        if state is not None:
            state.changed()
            self.on_change("podgroups", obj)

    def changed(self, kind: str, obj: dict) -> None:
        self._seen(obj)

    def synced(self, objects: list[dict], listed: bool) -> None:
        if listed:
            self._seen(None)
