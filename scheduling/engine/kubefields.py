"""The Kubernetes scheduling fields of pods and nodes (SPEC 10), checked in the API's own forms.

One reader for every door: a scenario (`engine.scenario`), the REST API and the Kubernetes
watcher all call it on the raw camelCase dicts, so a malformed value is refused the same way
everywhere, naming its full field path (`affinity.nodeAffinity.requiredDuringScheduling...
.matchExpressions[0].operator: unknown operator 'Near'`). Every problem is reported at once.

A pod is read in its flat form: `labels` beside the spec's own keys (`nodeName`,
`nodeSelector`, `affinity`, `tolerations`, `topologySpreadConstraints`, `schedulingGates`,
`priority`, `volumes`, `containers`, `initContainers`), a node as `labels`, `taints`, `unschedulable`,
`allocatable`; `pod_object_problems`/`node_object_problems` read the API's objects
(`metadata`, `spec`, `status`) with paths as the API names them. The rules are the API
server's own validation, so an object the API server accepted is never refused here.
`pod_spec_fields`/`node_fields` (and their `_object_` forms) turn checked fields into the
`PodSpec`/`Node` keyword arguments.

The GPU resources of SPEC 2 are left out: they are the engine's to judge (a bad one rejects
the pod, SPEC 9), as is the shape of `containers` itself.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping

from . import quantity
from .requests import FAMILY_OF_RESOURCE as GPU_RESOURCES

#: A problem: the field path and what is wrong with it.
Problem = tuple[str, str]

TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
TOLERATION_OPERATORS = ("Equal", "Exists")
NODE_SELECTOR_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt")
LABEL_SELECTOR_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist")
WHEN_UNSATISFIABLE = ("DoNotSchedule", "ScheduleAnyway")
INCLUSION_POLICIES = ("Honor", "Ignore")
PROTOCOLS = ("TCP", "UDP", "SCTP")
#: The one node field `matchFields` may name.
NODE_NAME_FIELD = "metadata.name"
#: Preferred terms' weights, as the API server bounds them.
WEIGHTS = (1, 100)
LARGEST_PORT = 65535
INT32 = (-(2**31), 2**31 - 1)

_NAME = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
_PREFIX = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_LONGEST_NAME = 63
_LONGEST_PREFIX = 253

_NODE_AFFINITY_KEYS = (
    "requiredDuringSchedulingIgnoredDuringExecution",
    "preferredDuringSchedulingIgnoredDuringExecution",
)
_AFFINITY_KEYS = ("nodeAffinity", "podAffinity", "podAntiAffinity")
_POD_AFFINITY_TERM_KEYS = (
    "labelSelector",
    "namespaces",
    "topologyKey",
    "namespaceSelector",
    "matchLabelKeys",
    "mismatchLabelKeys",
)
_TOLERATION_KEYS = ("key", "operator", "value", "effect", "tolerationSeconds")
_SPREAD_KEYS = (
    "maxSkew",
    "topologyKey",
    "whenUnsatisfiable",
    "labelSelector",
    "minDomains",
    "nodeAffinityPolicy",
    "nodeTaintsPolicy",
    "matchLabelKeys",
)
_TAINT_KEYS = ("key", "value", "effect", "timeAdded")
_PORT_KEYS = ("containerPort", "hostPort", "protocol", "hostIP", "name")


def _at(where: str, key: str | int) -> str:
    if isinstance(key, int):
        return f"{where}[{key}]"
    return f"{where}.{key}" if where else key


def _type_name(value) -> str:
    return "null" if value is None else type(value).__name__


def _or(choices) -> str:
    return f"{', '.join(choices[:-1])} or {choices[-1]}"


class _Found:
    """The problems found so far, in the order met."""

    def __init__(self) -> None:
        self.problems: list[Problem] = []

    def note(self, where: str, message: str) -> None:
        self.problems.append((where, message))

    def mapping(self, value, where: str, what: str = "an object") -> Mapping | None:
        """`value` when it is a mapping (None: absent); else noted, None."""
        if value is None or isinstance(value, Mapping):
            return value
        self.note(where, f"must be {what}, got {_type_name(value)}")
        return None

    def items(self, value, where: str, what: str) -> list:
        """`value` when it is a list (None: empty); else noted, []."""
        if value is None:
            return []
        if isinstance(value, list):
            return value
        self.note(where, f"must be a list of {what}, got {_type_name(value)}")
        return []

    def known(self, value: Mapping, where: str, keys) -> None:
        for key in value:
            if key not in keys:
                self.note(_at(where, str(key)), f"unknown field (known: {', '.join(keys)})")

    def text(self, value, where: str, *, required: bool = False) -> str | None:
        if value is None and not required:
            return None
        if not isinstance(value, str) or (required and not value):
            self.note(
                where, "required: a non-empty string" if required else f"must be a string, got {value!r}"
            )
            return None
        return value

    def whole(self, value, where: str, low: int, high: int, *, required: bool = False) -> int | None:
        if value is None:
            if required:
                self.note(where, "required: an integer")
            return None
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        if isinstance(value, bool) or not isinstance(value, int):
            self.note(where, f"must be an integer, got {value!r}")
            return None
        if not low <= value <= high:
            self.note(where, f"must be from {low} to {high}, got {value}")
            return None
        return value

    def choice(self, value, where: str, choices, *, what: str = "") -> None:
        if value not in choices:
            shown = f"unknown {what} {value!r}" if what else f"must be {_or(choices)}, not {value!r}"
            if what:
                shown += f" (known: {', '.join(choices)})"
            self.note(where, shown)


# Labels and selectors


def _qualified_name_problem(key: str) -> str | None:
    """Why `key` is not a label key (`[prefix/]name`), or None when it is one."""
    prefix, _, name = key.rpartition("/")
    if "/" in key and (not prefix or len(prefix) > _LONGEST_PREFIX or not _PREFIX.match(prefix)):
        return "its prefix must be a lowercase DNS subdomain (at most 253 characters)"
    if not name or len(name) > _LONGEST_NAME or not _NAME.match(name):
        return (
            "must be at most 63 letters, digits, '-', '_' or '.', starting and ending with a letter or digit"
        )
    return None


def _label_key(found: _Found, key, where: str) -> None:
    if not isinstance(key, str) or not key:
        found.note(where, f"a label key must be a non-empty string, got {key!r}")
        return
    problem = _qualified_name_problem(key)
    if problem:
        found.note(where, f"not a label key ({problem}): {key!r}")


def _label_value(found: _Found, value, where: str) -> None:
    if not isinstance(value, str):
        found.note(where, f"must be a string, got {value!r}")
    elif value and (len(value) > _LONGEST_NAME or not _NAME.match(value)):
        found.note(
            where,
            "not a label value (at most 63 letters, digits, '-', '_' or '.', starting and ending "
            f"with a letter or digit): {value!r}",
        )


def _labels(found: _Found, value, where: str) -> None:
    """A label map (`labels`, `nodeSelector`, `matchLabels`): label keys to label values."""
    value = found.mapping(value, where, "a map of label key to value")
    for key, item in (value or {}).items():
        _label_key(found, key, _at(where, str(key)))
        _label_value(found, item, _at(where, str(key)))


def _label_keys(found: _Found, value, where: str) -> list[str]:
    keys = []
    for i, key in enumerate(found.items(value, where, "label keys")):
        _label_key(found, key, _at(where, i))
        if isinstance(key, str):
            keys.append(key)
    return keys


def _values(found: _Found, requirement: Mapping, where: str) -> list:
    values = found.items(requirement.get("values"), _at(where, "values"), "strings")
    for i, value in enumerate(values):
        if not isinstance(value, str):
            found.note(_at(_at(where, "values"), i), f"must be a string, got {value!r}")
    return values


def _requirement(found: _Found, requirement, where: str, operators, *, field: bool = False) -> None:
    """One `{key, operator, values}` of a node selector term (`field`: of `matchFields`) or of
    a label selector (`operators` says which)."""
    requirement = found.mapping(requirement, where)
    if requirement is None:
        return
    found.known(requirement, where, ("key", "operator", "values"))
    key = requirement.get("key")
    if field:
        if key != NODE_NAME_FIELD:
            found.note(
                _at(where, "key"),
                f"must be {NODE_NAME_FIELD!r} (the only field matchFields reads), not {key!r}",
            )
    elif key is None or key == "":
        found.note(_at(where, "key"), "required: a label key")
    else:
        _label_key(found, key, _at(where, "key"))
    operator = requirement.get("operator")
    values = _values(found, requirement, where)
    if field and operator in ("In", "NotIn"):
        if len(values) != 1:
            found.note(
                _at(where, "values"), f"must hold exactly one node name for {operator}, got {len(values)}"
            )
        return
    if field:
        found.note(_at(where, "operator"), f"must be In or NotIn for matchFields, not {operator!r}")
        return
    if operator not in operators:
        found.choice(operator, _at(where, "operator"), operators, what="operator")
        return
    if operator in ("In", "NotIn") and not values:
        found.note(_at(where, "values"), f"required for {operator}: a non-empty list")
    elif operator in ("Exists", "DoesNotExist") and values:
        found.note(_at(where, "values"), f"must be empty for {operator}")
    elif operator in ("Gt", "Lt"):
        if len(values) != 1:
            found.note(
                _at(where, "values"), f"must hold exactly one integer for {operator}, got {len(values)}"
            )
        elif isinstance(values[0], str) and not re.fullmatch(r"[+-]?[0-9]+", values[0]):
            found.note(_at(_at(where, "values"), 0), f"must be an integer for {operator}, got {values[0]!r}")
    else:
        for i, value in enumerate(values):
            if isinstance(value, str):
                _label_value(found, value, _at(_at(where, "values"), i))


def _label_selector(found: _Found, selector, where: str) -> set[str]:
    """A label selector (`matchLabels`, `matchExpressions`); the keys it names."""
    selector = found.mapping(selector, where)
    if selector is None:
        return set()
    found.known(selector, where, ("matchLabels", "matchExpressions"))
    _labels(found, selector.get("matchLabels"), _at(where, "matchLabels"))
    named = {key for key in (selector.get("matchLabels") or {}) if isinstance(key, str)}
    expressions = _at(where, "matchExpressions")
    for i, requirement in enumerate(
        found.items(selector.get("matchExpressions"), expressions, "requirements")
    ):
        _requirement(found, requirement, _at(expressions, i), LABEL_SELECTOR_OPERATORS)
        if isinstance(requirement, Mapping) and isinstance(requirement.get("key"), str):
            named.add(requirement["key"])
    return named


def _node_selector_term(found: _Found, term, where: str) -> None:
    term = found.mapping(term, where)
    if term is None:
        return
    found.known(term, where, ("matchExpressions", "matchFields"))
    for key, field in (("matchExpressions", False), ("matchFields", True)):
        listed = _at(where, key)
        for i, requirement in enumerate(found.items(term.get(key), listed, "requirements")):
            _requirement(found, requirement, _at(listed, i), NODE_SELECTOR_OPERATORS, field=field)


def _weighted(found: _Found, entry, where: str, term_key: str) -> Mapping | None:
    """A preferred term's `{weight, <term_key>}`; the term, for the caller to check."""
    entry = found.mapping(entry, where)
    if entry is None:
        return None
    found.known(entry, where, ("weight", term_key))
    found.whole(entry.get("weight"), _at(where, "weight"), *WEIGHTS, required=True)
    if entry.get(term_key) is None:
        found.note(_at(where, term_key), "required")
        return None
    return entry


# Affinity


def _node_affinity(found: _Found, value, where: str) -> None:
    value = found.mapping(value, where)
    if value is None:
        return
    found.known(value, where, _NODE_AFFINITY_KEYS)
    required_at = _at(where, _NODE_AFFINITY_KEYS[0])
    required = found.mapping(value.get(_NODE_AFFINITY_KEYS[0]), required_at)
    if required is not None:
        found.known(required, required_at, ("nodeSelectorTerms",))
        terms_at = _at(required_at, "nodeSelectorTerms")
        terms = found.items(required.get("nodeSelectorTerms"), terms_at, "node selector terms")
        if not terms and isinstance(required.get("nodeSelectorTerms", []), list):
            found.note(terms_at, "required: at least one node selector term")
        for i, term in enumerate(terms):
            _node_selector_term(found, term, _at(terms_at, i))
    preferred_at = _at(where, _NODE_AFFINITY_KEYS[1])
    for i, entry in enumerate(found.items(value.get(_NODE_AFFINITY_KEYS[1]), preferred_at, "weighted terms")):
        entry_at = _at(preferred_at, i)
        checked = _weighted(found, entry, entry_at, "preference")
        if checked is not None:
            _node_selector_term(found, checked["preference"], _at(entry_at, "preference"))


def _pod_affinity_term(found: _Found, term, where: str) -> None:
    term = found.mapping(term, where)
    if term is None:
        return
    found.known(term, where, _POD_AFFINITY_TERM_KEYS)
    topology_key = term.get("topologyKey")
    if not isinstance(topology_key, str) or not topology_key:
        found.note(_at(where, "topologyKey"), "required: a non-empty label key")
    else:
        _label_key(found, topology_key, _at(where, "topologyKey"))
    selected = _label_selector(found, term.get("labelSelector"), _at(where, "labelSelector"))
    namespaces_at = _at(where, "namespaces")
    for i, namespace in enumerate(found.items(term.get("namespaces"), namespaces_at, "namespace names")):
        found.text(namespace, _at(namespaces_at, i), required=True)
    _label_selector(found, term.get("namespaceSelector"), _at(where, "namespaceSelector"))
    for key in ("matchLabelKeys", "mismatchLabelKeys"):
        keys = _label_keys(found, term.get(key), _at(where, key))
        if keys and term.get("labelSelector") is None:
            found.note(_at(where, key), "needs a labelSelector")
        for i, label in enumerate(keys):
            if label in selected:
                found.note(_at(_at(where, key), i), f"{label!r} is also in the labelSelector")


def _pod_affinity(found: _Found, value, where: str) -> None:
    value = found.mapping(value, where)
    if value is None:
        return
    found.known(value, where, _NODE_AFFINITY_KEYS)
    required_at = _at(where, _NODE_AFFINITY_KEYS[0])
    for i, term in enumerate(
        found.items(value.get(_NODE_AFFINITY_KEYS[0]), required_at, "pod affinity terms")
    ):
        _pod_affinity_term(found, term, _at(required_at, i))
    preferred_at = _at(where, _NODE_AFFINITY_KEYS[1])
    for i, entry in enumerate(found.items(value.get(_NODE_AFFINITY_KEYS[1]), preferred_at, "weighted terms")):
        entry_at = _at(preferred_at, i)
        checked = _weighted(found, entry, entry_at, "podAffinityTerm")
        if checked is not None:
            _pod_affinity_term(found, checked["podAffinityTerm"], _at(entry_at, "podAffinityTerm"))


def _affinity(found: _Found, value, where: str) -> None:
    value = found.mapping(value, where)
    if value is None:
        return
    found.known(value, where, _AFFINITY_KEYS)
    _node_affinity(found, value.get("nodeAffinity"), _at(where, "nodeAffinity"))
    _pod_affinity(found, value.get("podAffinity"), _at(where, "podAffinity"))
    _pod_affinity(found, value.get("podAntiAffinity"), _at(where, "podAntiAffinity"))


# Tolerations, spread, gates


def _toleration(found: _Found, value, where: str) -> None:
    value = found.mapping(value, where)
    if value is None:
        return
    found.known(value, where, _TOLERATION_KEYS)
    key = value.get("key") or ""
    if key != "":
        if not isinstance(key, str):
            found.note(_at(where, "key"), f"must be a string, got {key!r}")
        else:
            _label_key(found, key, _at(where, "key"))
    operator = value.get("operator") or "Equal"
    found.choice(operator, _at(where, "operator"), TOLERATION_OPERATORS)
    toleration_value = value.get("value") or ""
    if not isinstance(toleration_value, str):
        found.note(_at(where, "value"), f"must be a string, got {toleration_value!r}")
    elif operator == "Exists" and toleration_value:
        found.note(_at(where, "value"), f"must be empty when operator is Exists, got {toleration_value!r}")
    elif toleration_value:
        _label_value(found, toleration_value, _at(where, "value"))
    if key == "" and operator == "Equal":
        found.note(_at(where, "operator"), "must be Exists when key is empty (tolerates every taint)")
    effect = value.get("effect") or ""
    if effect != "":
        found.choice(effect, _at(where, "effect"), TAINT_EFFECTS)
    if value.get("tolerationSeconds") is not None:
        found.whole(value["tolerationSeconds"], _at(where, "tolerationSeconds"), -(2**63), 2**63 - 1)
        if effect != "NoExecute":
            found.note(_at(where, "effect"), "must be NoExecute when tolerationSeconds is set")


def _spread(found: _Found, value, where: str, position: int, seen: dict) -> None:
    value = found.mapping(value, where)
    if value is None:
        return
    found.known(value, where, _SPREAD_KEYS)
    found.whole(value.get("maxSkew"), _at(where, "maxSkew"), 1, INT32[1], required=True)
    topology_key = value.get("topologyKey")
    if not isinstance(topology_key, str) or not topology_key:
        found.note(_at(where, "topologyKey"), "required: a non-empty label key")
    else:
        _label_key(found, topology_key, _at(where, "topologyKey"))
    when = value.get("whenUnsatisfiable")
    if when is None:
        found.note(_at(where, "whenUnsatisfiable"), f"required: {_or(WHEN_UNSATISFIABLE)}")
    else:
        found.choice(when, _at(where, "whenUnsatisfiable"), WHEN_UNSATISFIABLE)
    pair = (topology_key, when)
    if isinstance(topology_key, str) and isinstance(when, str):
        if pair in seen:
            found.note(where, f"repeats topologySpreadConstraints[{seen[pair]}] ({topology_key}, {when})")
        else:
            seen[pair] = position
    if value.get("minDomains") is not None:
        found.whole(value["minDomains"], _at(where, "minDomains"), 1, INT32[1])
        if when != "DoNotSchedule":
            found.note(_at(where, "minDomains"), "only with whenUnsatisfiable DoNotSchedule")
    for key in ("nodeAffinityPolicy", "nodeTaintsPolicy"):
        if value.get(key) is not None:
            found.choice(value[key], _at(where, key), INCLUSION_POLICIES)
    selected = _label_selector(found, value.get("labelSelector"), _at(where, "labelSelector"))
    keys = _label_keys(found, value.get("matchLabelKeys"), _at(where, "matchLabelKeys"))
    if keys and value.get("labelSelector") is None:
        found.note(_at(where, "matchLabelKeys"), "needs a labelSelector")
    for i, label in enumerate(keys):
        if label in selected:
            found.note(_at(_at(where, "matchLabelKeys"), i), f"{label!r} is also in the labelSelector")


def _gates(found: _Found, value, where: str) -> None:
    seen: dict[str, int] = {}
    for i, gate in enumerate(found.items(value, where, "{name} gates")):
        gate_at = _at(where, i)
        gate = found.mapping(gate, gate_at, "an object {name}")
        if gate is None:
            continue
        found.known(gate, gate_at, ("name",))
        name = found.text(gate.get("name"), _at(gate_at, "name"), required=True)
        if name is None:
            continue
        problem = _qualified_name_problem(name)
        if problem:
            found.note(_at(gate_at, "name"), f"not a gate name ({problem}): {name!r}")
        elif name in seen:
            found.note(_at(gate_at, "name"), f"{name!r} repeats {where}[{seen[name]}]")
        else:
            seen[name] = i


def _volumes(found: _Found, value, where: str) -> None:
    """`volumes`: each a named object; a `persistentVolumeClaim` names its claim, an
    `ephemeral` volume is an object (its claim is `<pod>-<volume>`). Other kinds are not
    read. The claims are judged by `VolumeBinding` (`noderules.volumes`)."""
    seen: dict[str, int] = {}
    for i, volume in enumerate(found.items(value, where, "volumes")):
        volume_at = _at(where, i)
        volume = found.mapping(volume, volume_at)
        if volume is None:
            continue
        name = found.text(volume.get("name"), _at(volume_at, "name"), required=True)
        if name is not None:
            if name in seen:
                found.note(_at(volume_at, "name"), f"{name!r} repeats {where}[{seen[name]}]")
            seen.setdefault(name, i)
        if volume.get("persistentVolumeClaim") is not None:
            claim_at = _at(volume_at, "persistentVolumeClaim")
            claim = found.mapping(volume["persistentVolumeClaim"], claim_at)
            if claim is not None:
                found.text(claim.get("claimName"), _at(claim_at, "claimName"), required=True)
        if volume.get("ephemeral") is not None:
            found.mapping(volume["ephemeral"], _at(volume_at, "ephemeral"))


# Resources, containers, ports


def _quantity(found: _Found, value, where: str) -> None:
    exact = quantity.parse(value)
    if exact is None:
        found.note(where, f"not a quantity: {value!r}")
    elif exact < 0:
        found.note(where, f"must not be negative, got {value!r}")
    elif exact > quantity.LARGEST_QUANTITY:
        found.note(where, f"out of range: {value!r}")


def _resources(found: _Found, value, where: str, *, skip=()) -> None:
    """A resource-name -> quantity map; the resources in `skip` are someone else's to judge."""
    value = found.mapping(value, where, "a map of resource name to quantity")
    for name, amount in (value or {}).items():
        if not isinstance(name, str) or not name:
            found.note(where, f"a resource name must be a non-empty string, got {name!r}")
        elif name not in skip:
            _quantity(found, amount, _at(where, name))


def _port(found: _Found, value, where: str) -> None:
    value = found.mapping(value, where)
    if value is None:
        return
    found.known(value, where, _PORT_KEYS)
    found.whole(value.get("containerPort"), _at(where, "containerPort"), 1, LARGEST_PORT, required=True)
    found.whole(value.get("hostPort"), _at(where, "hostPort"), 0, LARGEST_PORT)
    if value.get("protocol") is not None:
        found.choice(value["protocol"], _at(where, "protocol"), PROTOCOLS)
    host_ip = value.get("hostIP")
    if host_ip not in (None, ""):
        try:
            ipaddress.ip_address(host_ip if isinstance(host_ip, str) else "")
        except ValueError:
            found.note(_at(where, "hostIP"), f"not an IP address: {host_ip!r}")
    found.text(value.get("name"), _at(where, "name"))


def _container(found: _Found, container, where: str, *, init: bool) -> None:
    """A container's scheduling fields; the container's shape is the engine's (SPEC 2)."""
    if not isinstance(container, Mapping):
        return
    resources = container.get("resources")
    if isinstance(resources, Mapping):
        for section in ("requests", "limits"):
            _resources(found, resources.get(section), f"{where}.resources.{section}", skip=GPU_RESOURCES)
    ports_at = _at(where, "ports")
    for i, port in enumerate(found.items(container.get("ports"), ports_at, "ports")):
        _port(found, port, _at(ports_at, i))
    if init and container.get("restartPolicy") is not None and container["restartPolicy"] != "Always":
        found.note(
            _at(where, "restartPolicy"),
            f"must be Always (a sidecar) or left out, not {container['restartPolicy']!r}",
        )


def _containers(found: _Found, raw: Mapping, where: str) -> None:
    for key, init in (("containers", False), ("initContainers", True)):
        listed = raw.get(key)
        if isinstance(listed, list):
            for i, container in enumerate(listed):
                _container(found, container, _at(_at(where, key), i), init=init)


def _spec_fields(found: _Found, spec: Mapping, where: str) -> None:
    """The scheduling fields of a pod spec (everything but `labels`)."""
    if spec.get("nodeName") is not None:
        found.text(spec["nodeName"], _at(where, "nodeName"))
    _labels(found, spec.get("nodeSelector"), _at(where, "nodeSelector"))
    _affinity(found, spec.get("affinity"), _at(where, "affinity"))
    tolerations_at = _at(where, "tolerations")
    for i, toleration in enumerate(found.items(spec.get("tolerations"), tolerations_at, "tolerations")):
        _toleration(found, toleration, _at(tolerations_at, i))
    spread_at = _at(where, "topologySpreadConstraints")
    seen: dict = {}
    for i, constraint in enumerate(
        found.items(spec.get("topologySpreadConstraints"), spread_at, "constraints")
    ):
        _spread(found, constraint, _at(spread_at, i), i, seen)
    _gates(found, spec.get("schedulingGates"), _at(where, "schedulingGates"))
    found.whole(spec.get("priority"), _at(where, "priority"), *INT32)
    _volumes(found, spec.get("volumes"), _at(where, "volumes"))
    _containers(found, spec, where)


# The doors


def pod_field_problems(raw: Mapping, where: str = "") -> list[Problem]:
    """Every problem of a pod's Kubernetes fields in its flat form (`labels` beside the spec's
    keys), each as (field path under `where`, message); [] when there are none."""
    found = _Found()
    if not isinstance(raw, Mapping):
        return [(where, f"a pod must be an object, got {_type_name(raw)}")]
    _labels(found, raw.get("labels"), _at(where, "labels"))
    _spec_fields(found, raw, where)
    return found.problems


def pod_object_problems(pod: Mapping) -> list[Problem]:
    """`pod_field_problems` for a Pod object as the API server sends it (`metadata`, `spec`),
    with paths as the API names them (`spec.tolerations[0].effect`)."""
    found = _Found()
    metadata = found.mapping(pod.get("metadata"), "metadata") or {}
    _labels(found, metadata.get("labels"), "metadata.labels")
    spec = found.mapping(pod.get("spec"), "spec") or {}
    _spec_fields(found, spec, "spec")
    return found.problems


def running_pod_problems(raw: Mapping, where: str = "") -> list[Problem]:
    """The fields of a pod someone else bound that count here: labels, affinity, the
    containers' requests and ports (its GPUs are read from its allocation annotation)."""
    found = _Found()
    _labels(found, raw.get("labels"), _at(where, "labels"))
    _affinity(found, raw.get("affinity"), _at(where, "affinity"))
    for key in ("containers", "initContainers"):
        for i, container in enumerate(found.items(raw.get(key), _at(where, key), "containers")):
            found.mapping(container, _at(_at(where, key), i), "a container object")
    _containers(found, raw, where)
    return found.problems


def node_field_problems(raw: Mapping, where: str = "") -> list[Problem]:
    """Every problem of a node's Kubernetes fields (`labels`, `taints`, `unschedulable`,
    `allocatable`) as (field path under `where`, message)."""
    found = _Found()
    if not isinstance(raw, Mapping):
        return [(where, f"a node must be an object, got {_type_name(raw)}")]
    _labels(found, raw.get("labels"), _at(where, "labels"))
    taints_at = _at(where, "taints")
    seen: dict[tuple, int] = {}
    for i, taint in enumerate(found.items(raw.get("taints"), taints_at, "{key, value, effect} taints")):
        taint_at = _at(taints_at, i)
        taint = found.mapping(taint, taint_at)
        if taint is None:
            continue
        found.known(taint, taint_at, _TAINT_KEYS)
        key = taint.get("key")
        if not isinstance(key, str) or not key:
            found.note(_at(taint_at, "key"), "required: a non-empty label key")
        else:
            _label_key(found, key, _at(taint_at, "key"))
        if taint.get("value") not in (None, ""):
            _label_value(found, taint["value"], _at(taint_at, "value"))
        effect = taint.get("effect")
        if effect is None:
            found.note(_at(taint_at, "effect"), f"required: {_or(TAINT_EFFECTS)}")
        else:
            found.choice(effect, _at(taint_at, "effect"), TAINT_EFFECTS)
        pair = (key, effect)
        if isinstance(key, str) and isinstance(effect, str) and pair in seen:
            found.note(taint_at, f"repeats taints[{seen[pair]}] ({key}:{effect})")
        elif isinstance(key, str) and isinstance(effect, str):
            seen[pair] = i
    unschedulable = raw.get("unschedulable", False)
    if not isinstance(unschedulable, bool):
        found.note(_at(where, "unschedulable"), f"must be true or false, got {unschedulable!r}")
    _resources(found, raw.get("allocatable"), _at(where, "allocatable"))
    return found.problems


# Converters (call them on fields that passed their checks)


def pod_spec_fields(raw: Mapping) -> dict:
    """A checked flat pod's Kubernetes fields as `PodSpec` keyword arguments, in the API's own
    forms (the gates by name)."""
    gates = raw.get("schedulingGates") or []
    return {
        "labels": dict(raw.get("labels") or {}),
        "node_name": raw.get("nodeName") or "",
        "node_selector": dict(raw.get("nodeSelector") or {}),
        "affinity": raw.get("affinity") or None,
        "tolerations": list(raw.get("tolerations") or []),
        "topology_spread_constraints": list(raw.get("topologySpreadConstraints") or []),
        "scheduling_gates": [gate["name"] for gate in gates],
        "volumes": list(raw.get("volumes") or []),
    }


def pod_object_fields(pod: Mapping) -> dict:
    """`pod_spec_fields` of a checked Pod object (`metadata.labels` + `spec`)."""
    metadata = pod.get("metadata") or {}
    return pod_spec_fields({**(pod.get("spec") or {}), "labels": metadata.get("labels")})


def node_fields(raw: Mapping) -> dict:
    """A checked node's Kubernetes fields as `Node` keyword arguments (`taints` with `value`
    defaulting to empty, as the API server writes them)."""
    return {
        "labels": dict(raw.get("labels") or {}),
        "taints": [
            {"key": taint["key"], "value": taint.get("value") or "", "effect": taint["effect"]}
            for taint in raw.get("taints") or []
        ],
        "unschedulable": raw.get("unschedulable", False),
        "allocatable": dict(raw.get("allocatable") or {}),
    }


#: Where a Node object keeps each field `node_field_problems` reads.
_NODE_OBJECT_PATHS = {
    "labels": "metadata.labels",
    "taints": "spec.taints",
    "unschedulable": "spec.unschedulable",
    "allocatable": "status.allocatable",
}


def _flat_node(node: Mapping) -> dict:
    def part(key: str) -> Mapping:
        value = node.get(key)
        return value if isinstance(value, Mapping) else {}

    return {
        "labels": part("metadata").get("labels"),
        "taints": part("spec").get("taints"),
        "unschedulable": part("spec").get("unschedulable") or False,
        "allocatable": part("status").get("allocatable"),
    }


def node_object_problems(node: Mapping) -> list[Problem]:
    """`node_field_problems` for a Node object as the API server sends it, with paths as the
    API names them (`spec.taints[0].effect`, `status.allocatable.cpu`)."""
    problems = []
    for field, message in node_field_problems(_flat_node(node)):
        head = re.split(r"[.\[]", field, maxsplit=1)[0]
        problems.append((_NODE_OBJECT_PATHS[head] + field[len(head) :], message))
    return problems


def node_object_fields(node: Mapping) -> dict:
    """`node_fields` of a checked Node object."""
    return node_fields(_flat_node(node))
