"""kube-scheduler's `VolumeBinding` filter (SPEC 10): which nodes can mount a pod's claims.

A pod's `volumes` name PersistentVolumeClaims (`persistentVolumeClaim.claimName`; a generic
ephemeral volume is the claim `<pod>-<volume>`). `resolve` reads them against a `Storage`
(claims, volumes, storage classes, in the Kubernetes API's own forms) into `PodVolumes`:
everything the rule needs, hashable, so the per-node verdict depends only on the pod's
`PodVolumes` and the node's name and labels, and is cached with the other node rules.

The rule, as kube-scheduler's plugin judges it:
- a claim that does not exist, that names a storage class that does not exist, or that is
  unbound with an `Immediate` class (or none) refuses every node: PreFilter's words
  (`persistentvolumeclaim "data" not found`, `pod has unbound immediate
  PersistentVolumeClaims`);
- a claim bound to a volume with `nodeAffinity.required`: nodes it does not match fail with
  `node(s) had volume node affinity conflict`;
- an unbound claim of a `WaitForFirstConsumer` class: a node passes when an available volume
  (no `claimRef`, or one naming this claim; the claim's class; capacity at least the claim's
  request; every access mode the claim asks) is reachable from it, the smallest first and
  never one volume for two claims, or else when the class provisions (`provisioner` other
  than `kubernetes.io/no-provisioner`) and its `allowedTopologies`, if any, match the node;
  otherwise `node(s) didn't find available persistent volumes to bind`.

`PodVolumes.bindings(name, labels)` is what a bind to that node must do first (kube-scheduler's
PreBind): claim a volume (`spec.claimRef`) or ask for one to be provisioned there
(`volume.kubernetes.io/selected-node`). Not done: CSI storage capacity, volume modes, claim
selectors, VolumeRestrictions, NodeVolumeLimits, VolumeZone.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from ..errors import PodInvalid
from ..quantity import amount
from .terms import NodeTerm, _dict, _list, node_terms

IMMEDIATE, WAIT_FOR_FIRST_CONSUMER = "Immediate", "WaitForFirstConsumer"
BINDING_MODES = (IMMEDIATE, WAIT_FOR_FIRST_CONSUMER)
#: The provisioner of a class that only binds volumes made beforehand (local volumes).
NO_PROVISIONER = "kubernetes.io/no-provisioner"
ACCESS_MODES = ("ReadWriteOnce", "ReadOnlyMany", "ReadWriteMany", "ReadWriteOncePod")
#: The claim annotation that asks a provisioner for a volume reachable from that node.
SELECTED_NODE = "volume.kubernetes.io/selected-node"
#: The scenario's (and `Pod.scheduling`'s) keys of a `Storage`.
CLAIMS, VOLUMES, CLASSES = "persistentVolumeClaims", "persistentVolumes", "storageClasses"

NODE_CONFLICT = "node(s) had volume node affinity conflict"
BIND_CONFLICT = "node(s) didn't find available persistent volumes to bind"
UNBOUND_IMMEDIATE = "pod has unbound immediate PersistentVolumeClaims"


# --- the objects, read -------------------------------------------------------------------------


@dataclass(slots=True)
class Claim:
    """A PersistentVolumeClaim: `volume` is `spec.volumeName` ("" while unbound)."""

    name: str
    namespace: str = "default"
    storage_class: str = ""
    volume: str = ""
    request: int = 0
    access_modes: frozenset[str] = frozenset()

    @property
    def key(self) -> tuple[str, str]:
        return self.namespace, self.name


@dataclass(frozen=True, slots=True)
class Volume:
    """A PersistentVolume: `claim` is its `claimRef` (namespace, name), `terms` its
    `nodeAffinity.required.nodeSelectorTerms` (None: any node reaches it)."""

    name: str
    storage_class: str = ""
    capacity: int = 0
    access_modes: frozenset[str] = frozenset()
    claim: tuple[str, str] | None = None
    terms: tuple[NodeTerm, ...] | None = None


@dataclass(frozen=True, slots=True)
class StorageClass:
    name: str
    provisioner: str
    binding_mode: str = IMMEDIATE
    #: `allowedTopologies` as node terms (None: every node)
    topologies: tuple[NodeTerm, ...] | None = None


@dataclass(slots=True)
class Storage:
    """The claims, volumes and classes pods are judged against. Mutable: a scenario binds
    claims as it places pods (`bind`)."""

    claims: dict[tuple[str, str], Claim] = field(default_factory=dict)
    volumes: dict[str, Volume] = field(default_factory=dict)
    classes: dict[str, StorageClass] = field(default_factory=dict)


def _name(value, where: str) -> str:
    if not isinstance(value, str) or not value:
        raise PodInvalid(where, "required: a non-empty string")
    return value


def _optional_text(value, where: str) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise PodInvalid(where, f"must be a string, got {value!r}")
    return value


def _access_modes(value, where: str) -> frozenset[str]:
    modes = _list(value, where)
    for i, mode in enumerate(modes):
        if mode not in ACCESS_MODES:
            raise PodInvalid(f"{where}[{i}]", f"must be one of {', '.join(ACCESS_MODES)}, got {mode!r}")
    return frozenset(modes)


def _storage_amount(section, where: str) -> int:
    """`<section>.storage` of a claim's requests or a volume's capacity, in bytes (0: absent)."""
    value = _dict(section, where).get("storage")
    return 0 if value is None else amount("storage", value, f"{where}.storage")


def read_claim(raw, where: str) -> Claim:
    raw = _dict(raw, where)
    resources = _dict(raw.get("resources"), f"{where}.resources")
    return Claim(
        name=_name(raw.get("name"), f"{where}.name"),
        namespace=_optional_text(raw.get("namespace"), f"{where}.namespace") or "default",
        storage_class=_optional_text(raw.get("storageClassName"), f"{where}.storageClassName"),
        volume=_optional_text(raw.get("volumeName"), f"{where}.volumeName"),
        request=_storage_amount(resources.get("requests"), f"{where}.resources.requests"),
        access_modes=_access_modes(raw.get("accessModes"), f"{where}.accessModes"),
    )


def read_volume(raw, where: str) -> Volume:
    raw = _dict(raw, where)
    claim = None
    if raw.get("claimRef") is not None:
        ref = _dict(raw["claimRef"], f"{where}.claimRef")
        claim = (
            _optional_text(ref.get("namespace"), f"{where}.claimRef.namespace") or "default",
            _name(ref.get("name"), f"{where}.claimRef.name"),
        )
    terms = None
    affinity = _dict(raw.get("nodeAffinity"), f"{where}.nodeAffinity")
    if affinity.get("required") is not None:
        at = f"{where}.nodeAffinity.required"
        selector = _dict(affinity["required"], at)
        terms = node_terms(selector.get("nodeSelectorTerms"), f"{at}.nodeSelectorTerms")
    return Volume(
        name=_name(raw.get("name"), f"{where}.name"),
        storage_class=_optional_text(raw.get("storageClassName"), f"{where}.storageClassName"),
        capacity=_storage_amount(raw.get("capacity"), f"{where}.capacity"),
        access_modes=_access_modes(raw.get("accessModes"), f"{where}.accessModes"),
        claim=claim,
        terms=terms,
    )


def read_class(raw, where: str) -> StorageClass:
    raw = _dict(raw, where)
    mode = raw.get("volumeBindingMode", IMMEDIATE)
    if mode not in BINDING_MODES:
        raise PodInvalid(f"{where}.volumeBindingMode", f"must be {' or '.join(BINDING_MODES)}, got {mode!r}")
    topologies = None
    listed = _list(raw.get("allowedTopologies"), f"{where}.allowedTopologies")
    if listed:
        # a topology term's `matchLabelExpressions` ({key, values}) mean `In`: read as node terms
        terms = []
        for i, term in enumerate(listed):
            at = f"{where}.allowedTopologies[{i}]"
            expressions = _list(_dict(term, at).get("matchLabelExpressions"), f"{at}.matchLabelExpressions")
            terms.append(
                {
                    "matchExpressions": [
                        {**_dict(e, f"{at}.matchLabelExpressions[{j}]"), "operator": "In"}
                        for j, e in enumerate(expressions)
                    ]
                }
            )
        topologies = node_terms(terms, f"{where}.allowedTopologies")
    return StorageClass(
        name=_name(raw.get("name"), f"{where}.name"),
        provisioner=_name(raw.get("provisioner"), f"{where}.provisioner"),
        binding_mode=mode,
        topologies=topologies,
    )


def read_storage(raw: Mapping, where: str = "") -> Storage:
    """The claims, volumes and classes of a scenario (or of `Pod.scheduling`) under their
    SPEC 10 keys; PodInvalid naming the field (`persistentVolumes[0].capacity.storage`). A
    name given twice is refused."""
    at = (lambda key: f"{where}.{key}") if where else (lambda key: key)
    storage = Storage()
    for i, entry in enumerate(_list(raw.get(CLAIMS), at(CLAIMS))):
        claim = read_claim(entry, f"{at(CLAIMS)}[{i}]")
        if claim.key in storage.claims:
            raise PodInvalid(f"{at(CLAIMS)}[{i}].name", f"{'/'.join(claim.key)} is given twice")
        storage.claims[claim.key] = claim
    for i, entry in enumerate(_list(raw.get(VOLUMES), at(VOLUMES))):
        volume = read_volume(entry, f"{at(VOLUMES)}[{i}]")
        if volume.name in storage.volumes:
            raise PodInvalid(f"{at(VOLUMES)}[{i}].name", f"{volume.name} is given twice")
        storage.volumes[volume.name] = volume
    for i, entry in enumerate(_list(raw.get(CLASSES), at(CLASSES))):
        cls = read_class(entry, f"{at(CLASSES)}[{i}]")
        if cls.name in storage.classes:
            raise PodInvalid(f"{at(CLASSES)}[{i}].name", f"{cls.name} is given twice")
        storage.classes[cls.name] = cls
    return storage


def claim_names(pod_name: str, volumes, where: str = "volumes") -> tuple[tuple[str, bool], ...]:
    """The claims a pod's `volumes` use, in order, each once: (claim name, whether it is a
    generic ephemeral volume's). PodInvalid naming the field for a malformed entry."""
    found: dict[str, bool] = {}
    for i, volume in enumerate(_list(volumes, where)):
        volume = _dict(volume, f"{where}[{i}]")
        name = _name(volume.get("name"), f"{where}[{i}].name")
        if volume.get("persistentVolumeClaim") is not None:
            at = f"{where}[{i}].persistentVolumeClaim"
            claim = _dict(volume["persistentVolumeClaim"], at)
            found.setdefault(_name(claim.get("claimName"), f"{at}.claimName"), False)
        elif volume.get("ephemeral") is not None:
            _dict(volume["ephemeral"], f"{where}[{i}].ephemeral")
            found.setdefault(f"{pod_name}-{name}", True)
    return tuple(found.items())


# --- the rule ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ClaimNeed:
    """One claim of the pod, resolved: bound (`volume`, its `terms`) or waiting for its first
    consumer (`candidates`, smallest first; `provisioner` when the class can make one)."""

    claim: str
    volume: str = ""
    terms: tuple[NodeTerm, ...] | None = None
    bound: bool = True
    candidates: tuple[Volume, ...] = ()
    provisioner: str = ""
    topologies: tuple[NodeTerm, ...] | None = None


@dataclass(frozen=True, slots=True)
class Binding:
    """What a bind to the chosen node does first for one claim: claim `volume`, or (`volume`
    "") ask `provisioner` for one there."""

    claim: str
    volume: str = ""
    provisioner: str = ""


@dataclass(frozen=True, slots=True)
class PodVolumes:
    """A pod's claims, resolved. `refusal`: kube-scheduler's PreFilter words when every node is
    refused (a missing claim, an unbound immediate one), "" otherwise."""

    namespace: str = "default"
    needs: tuple[ClaimNeed, ...] = ()
    refusal: str = ""
    #: what would lift `refusal`, in words
    remedy: str = ""

    def __bool__(self) -> bool:
        return bool(self.needs or self.refusal)

    def plan(
        self, name: str, labels: dict[str, str]
    ) -> tuple[tuple[tuple[ClaimNeed, str], ...], tuple[Binding, ...]]:
        """On the node `name` with `labels`: the claims it cannot mount, each with the rule's
        words, and the bindings a bind there makes (a volume is chosen for one claim only)."""
        failed: list[tuple[ClaimNeed, str]] = []
        bindings: list[Binding] = []
        taken: set[str] = set()
        for need in self.needs:
            if need.bound:
                if not _reaches(need.terms, name, labels):
                    failed.append((need, NODE_CONFLICT))
                continue
            chosen = next(
                (v for v in need.candidates if v.name not in taken and _reaches(v.terms, name, labels)), None
            )
            if chosen is not None:
                taken.add(chosen.name)
                bindings.append(Binding(need.claim, volume=chosen.name))
            elif need.provisioner and _reaches(need.topologies, name, labels):
                bindings.append(Binding(need.claim, provisioner=need.provisioner))
            else:
                failed.append((need, BIND_CONFLICT))
        return tuple(failed), tuple(bindings)

    def refuse(self, name: str, labels: dict[str, str]) -> tuple[str, ...]:
        """The rule's messages for this node (kube-scheduler's order); none when it can mount
        every claim."""
        if self.refusal:
            return (self.refusal,)
        if not self.needs:
            return ()
        said = {words for _, words in self.plan(name, labels)[0]}
        return tuple(words for words in (NODE_CONFLICT, BIND_CONFLICT) if words in said)

    def bindings(self, name: str, labels: dict[str, str]) -> tuple[Binding, ...]:
        """What a bind to this node must do first (kube-scheduler's PreBind); () when the node
        cannot mount the claims (the rule refuses it) or every claim is bound."""
        failed, bindings = self.plan(name, labels)
        return () if failed or self.refusal else bindings

    def hints(self, name: str, labels: dict[str, str]) -> tuple[str, ...]:
        """What would let `name` mount the claims, in words, in the pod's order of claims."""
        if self.refusal:
            return (self.remedy,)
        return tuple(
            f"claim {need.claim} is bound to volume {need.volume}, which {name} cannot reach"
            if words == NODE_CONFLICT
            else f"bind claim {need.claim} to a volume reachable from {name}"
            for need, words in self.plan(name, labels)[0]
        )


def _reaches(terms: tuple[NodeTerm, ...] | None, name: str, labels: dict[str, str]) -> bool:
    """Whether node terms (a volume's node affinity, a class's topologies) admit the node;
    None admits every node."""
    return terms is None or any(term.matches(name, labels) for term in terms)


NO_VOLUMES = PodVolumes()


def _fits(volume: Volume, claim: Claim) -> bool:
    """Whether an unclaimed (or pre-bound) volume could be bound to `claim`."""
    return (
        (volume.claim is None or volume.claim == claim.key)
        and volume.storage_class == claim.storage_class
        and volume.capacity >= claim.request
        and claim.access_modes <= volume.access_modes
    )


def resolve(namespace: str, pod_name: str, volumes, storage: Storage | None) -> PodVolumes:
    """The pod's claims against `storage` (None: no storage given, the pod's volumes are not
    judged). PodInvalid naming the field for malformed `volumes`."""
    names = claim_names(pod_name, volumes)
    if not names or storage is None:
        return NO_VOLUMES
    needs: list[ClaimNeed] = []
    refusals: list[tuple[int, str, str]] = []  # (stage, words, remedy): the first stage's first wins
    for name, ephemeral in names:
        claim = storage.claims.get((namespace, name))
        if claim is None:
            if ephemeral:
                words = (
                    f'waiting for ephemeral volume controller to create the persistentvolumeclaim "{name}"'
                )
                refusals.append((0, words, f"wait for claim {name} to be created"))
            else:
                words = f'persistentvolumeclaim "{name}" not found'
                refusals.append((0, words, f"create claim {name} in namespace {namespace}"))
            continue
        if claim.volume:
            volume = storage.volumes.get(claim.volume)
            if volume is None:
                words = (
                    f'persistentvolumeclaim "{name}" bound to non-existent persistentvolume "{claim.volume}"'
                )
                refusals.append(
                    (0, words, f"give claim {name} a volume again (volume {claim.volume} is gone)")
                )
                continue
            needs.append(ClaimNeed(name, volume=volume.name, terms=volume.terms))
            continue
        cls = storage.classes.get(claim.storage_class) if claim.storage_class else None
        if claim.storage_class and cls is None:
            words = f'storageclass.storage.k8s.io "{claim.storage_class}" not found'
            refusals.append((1, words, f"create storage class {claim.storage_class}"))
            continue
        if cls is None or cls.binding_mode != WAIT_FOR_FIRST_CONSUMER:
            refusals.append(
                (2, UNBOUND_IMMEDIATE, f"wait for claim {name} to be bound (it binds immediately)")
            )
            continue
        candidates = sorted(
            (v for v in storage.volumes.values() if _fits(v, claim)),
            key=lambda v: (v.claim is None, v.capacity, v.name),  # pre-bound first, then smallest
        )
        needs.append(
            ClaimNeed(
                name,
                bound=False,
                candidates=tuple(candidates),
                provisioner="" if cls.provisioner == NO_PROVISIONER else cls.provisioner,
                topologies=cls.topologies,
            )
        )
    if refusals:
        _, refusal, remedy = min(refusals, key=lambda found: found[0])
        return PodVolumes(namespace, tuple(needs), refusal, remedy)
    return PodVolumes(namespace, tuple(needs))


def bind(storage: Storage, volumes: PodVolumes, name: str, labels: dict[str, str]) -> None:
    """A pod with these claims was placed on `name`: bind its claims to the volumes chosen
    there (`claimRef` and `volumeName`), as the volume controller will after PreBind, so the
    next pod does not count on them. A claim left to a provisioner stays unbound."""
    for binding in volumes.bindings(name, labels):
        claim = storage.claims.get((volumes.namespace, binding.claim))
        volume = storage.volumes.get(binding.volume) if binding.volume else None
        if claim is None or volume is None:
            continue
        claim.volume = volume.name
        storage.volumes[volume.name] = Volume(
            volume.name, volume.storage_class, volume.capacity, volume.access_modes, claim.key, volume.terms
        )
