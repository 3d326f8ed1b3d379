"""SPEC 9: reading a scenario (cluster + pods) and running it. Validation says where input is bad."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from .batch.preempt import Rules
from .batch.scenario import check_batch, run_batch_scenario, wants_batch
from .dra.scenario import run_dra_scenario, wants_dra
from .encoding import ALLOCATED, decode_allocation, links_to_pairs
from .errors import PodInvalid, Problems, ScenarioError
from .families import family_of_card, held_allocation, mig
from .kubefields import (
    node_field_problems,
    node_fields,
    pod_field_problems,
    pod_spec_fields,
    running_pod_problems,
)
from .model import CARD_DEFAULTS, Card, Cluster, ClusterConfig, Node, PodSpec, ResourceDefaults, RunningPod
from .noderules import volumes
from .noderules.accounting import account_running
from .podschema import RUNNING_POD_KEYS, pod_problems
from .scheduler import Scheduler

#: The largest integer a scenario may carry: beyond 64 bits (1e300 is a whole float) a number
#: is a typo or an attack, and would overflow whatever stores it. Where the database keeps a
#: card's numbers in 32 bits, its writers bound them tighter (the agent report, the register).
LARGEST = 2**63 - 1
#: A card's `used` figures, in the order `parse_card` sets them.
USED = ("slots", "memory", "cores")


def _int(value, where: str, *, minimum: int | None = 0, maximum: int = LARGEST) -> int:
    """An integer (or a float with no fraction) from `minimum` (None: -maximum - 1) to
    `maximum`. Infinity, NaN and numbers like 1e300 are refused naming the field; JSON reads
    1e999 as infinity."""
    if isinstance(value, bool) or not isinstance(value, int):
        if isinstance(value, float) and value.is_integer():
            number = int(value)
        else:
            raise ScenarioError(where, f"must be an integer, got {value!r}")
    else:
        number = value
    lowest = -maximum - 1 if minimum is None else minimum
    if number < lowest:
        raise ScenarioError(where, f"must be >= {lowest}, got {_shown(value)}")
    if number > maximum:
        raise ScenarioError(where, f"must be at most {maximum}, got {_shown(value)}")
    return number


def _shown(number) -> str:
    """A number for a message: at most 40 characters (a 5000-digit int cannot even be printed)."""
    if isinstance(number, int) and abs(number) >= 10**40:
        return "a number of more than 40 digits"
    return repr(number)


def _dict(value, where: str) -> dict:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ScenarioError(where, f"must be an object, got {type(value).__name__}")
    return value


def _strings(value, where: str) -> dict[str, str]:
    value = _dict(value, where)
    for key, item in value.items():
        if not isinstance(item, str):
            raise ScenarioError(f"{where}.{key}", f"must be a string, got {item!r}")
    return value


def parse_card(raw, where: str, position: int) -> tuple[Card, dict]:
    """One card of SPEC 9 (without `links`, returned apart for the node to check). Raises
    ScenarioProblems with every bad field of the card."""
    if not isinstance(raw, dict):
        raise ScenarioError(where, "a card must be an object")
    found = Problems()
    uuid = raw.get("uuid")
    if not isinstance(uuid, str) or not uuid.strip():
        found.note(f"{where}.uuid", "required: a non-empty string")
    if "memory" not in raw:
        found.note(f"{where}.memory", "required (MiB)")
    card_type = raw.get("type", CARD_DEFAULTS["type"])
    if not isinstance(card_type, str):
        found.note(f"{where}.type", f"must be a string, got {card_type!r}")
    health = raw.get("health", CARD_DEFAULTS["health"])
    if not isinstance(health, bool):
        found.note(f"{where}.health", f"must be true or false, got {health!r}")
    cordoned = raw.get("cordoned", False)
    if not isinstance(cordoned, bool):
        found.note(f"{where}.cordoned", f"must be true or false, got {cordoned!r}")
    mode = raw.get("mode", "")
    numbers = {
        "index": found.check(_int, raw.get("index", position), f"{where}.index"),
        "memory": found.check(_int, raw["memory"], f"{where}.memory") if "memory" in raw else None,
        "slots": found.check(_int, raw.get("slots", CARD_DEFAULTS["slots"]), f"{where}.slots"),
        "cores": found.check(_int, raw.get("cores", CARD_DEFAULTS["cores"]), f"{where}.cores"),
        "numa": found.check(_int, raw.get("numa", CARD_DEFAULTS["numa"]), f"{where}.numa", minimum=None),
    }
    partition = found.check(_mig_geometry, raw, where)
    used = found.check(_dict, raw.get("used"), f"{where}.used") or {}
    used_numbers = [found.check(_int, used.get(key, 0), f"{where}.used.{key}") for key in USED]
    if partition is not None and "used" not in raw:  # a MIG card's instances are its usage
        used_numbers = [
            len(partition.held),
            sum(instance.memory for instance in partition.held),
            sum(instance.cores for instance in partition.held),
        ]
    links = found.check(_dict, raw.get("links"), f"{where}.links") or {}
    for other, score in links.items():
        found.check(_int, score, f"{where}.links.{other}")
    found.raise_any()
    assert isinstance(uuid, str)  # raise_any: every problem noted above is raised
    card = Card(
        uuid=uuid.strip(),
        type=card_type,
        health=health,
        cordoned=cordoned,
        mode=mode if isinstance(mode, str) else "",
        partition=partition,
        family=family_of_card(card_type, mode if isinstance(mode, str) else ""),
        **numbers,
    )
    card.used_slots, card.used_memory, card.used_cores = used_numbers
    return card, links


def _mig_geometry(raw: dict, where: str) -> mig.Geometry | None:
    """A card in MIG mode (`mode: mig`): its `migProfiles` as HAMi v2.10 registers them, and
    the instances its tenants hold (`migInstances`: `{"profile", "placement": {"start",
    "size"}}`, each a profile it lists at one of that profile's placements, none overlapping).
    Without `used`, the instances are the card's usage (a slot, the profile's MiB and cores
    each). None for another card, and for a `mig` card that lists no profiles (shared as
    vGPUs, as before); `migProfiles` on a card of another mode is refused."""
    profiles = mig.read_profiles(raw.get("migProfiles"), f"{where}.migProfiles")
    if raw.get("mode") != mig.MODE:
        if profiles or raw.get("migInstances"):
            raise ScenarioError(f"{where}.mode", "must be 'mig' for a card with migProfiles or migInstances")
        return None
    if not profiles:
        if raw.get("migInstances"):
            raise ScenarioError(
                f"{where}.migProfiles", "required with migInstances: the profiles the card is cut into"
            )
        return None  # a mode without profiles, as before HAMi v2.10: the card is shared as vGPUs
    geometry = mig.Geometry(profiles)
    instances = raw.get("migInstances") or []
    if not isinstance(instances, list):
        raise ScenarioError(f"{where}.migInstances", "must be a list of instances")
    for i, entry in enumerate(instances):
        at = f"{where}.migInstances[{i}]"
        if not isinstance(entry, dict):
            raise ScenarioError(at, 'expected {"profile": ..., "placement": {"start": N, "size": N}}')
        name = entry.get("profile")
        profile = geometry.profile(name) if isinstance(name, str) else None
        if profile is None:
            known = ", ".join(p.name for p in profiles)
            raise ScenarioError(f"{at}.profile", f"must be one of the card's profiles ({known})")
        placement = mig.read_placement(entry.get("placement"), f"{at}.placement")
        if placement not in profile.placements:
            raise ScenarioError(f"{at}.placement", f"not a placement of {profile.name}")
        if any(placement.overlaps(other) for other in geometry.occupied()):
            raise ScenarioError(f"{at}.placement", "overlaps another instance")
        geometry = geometry.take(mig.Instance(profile.name, placement, profile.memory, profile.cores))
    return geometry


def parse_node(raw, where: str) -> Node:
    """One node with its cards; UUIDs unique within it, indices unique, links consistent.
    Raises ScenarioProblems with every problem of the node and its cards."""
    if not isinstance(raw, dict):
        raise ScenarioError(where, "a node must be an object")
    found = Problems()
    name = raw.get("name")
    if not isinstance(name, str) or not name.strip():
        found.note(f"{where}.name", "required: a non-empty string")
    devices = raw.get("devices", [])
    if not isinstance(devices, list):
        found.note(f"{where}.devices", "must be a list of cards")
        devices = []
    cards: list[Card] = []
    given: list[tuple[str, dict]] = []
    agreed: dict[frozenset, int] = {}  # each pair's score as first given, to check the other side
    seen_index: dict[int, int] = {}
    for position, raw_card in enumerate(devices):
        card_where = f"{where}.devices[{position}]"
        parsed = found.check(parse_card, raw_card, card_where, position)
        if parsed is None:
            continue
        card, card_links = parsed
        if card.index in seen_index:
            found.note(f"{card_where}.index", f"index {card.index} repeats devices[{seen_index[card.index]}]")
            continue
        seen_index[card.index] = position
        cards.append(card)
        given.append((card.uuid, card_links))
        for other, score in card_links.items():
            first = agreed.setdefault(frozenset((card.uuid, other)), score)
            if first != score:
                found.note(f"{card_where}.links.{other}", f"{score} disagrees with {first} given on {other}")
    named = {d["uuid"].strip() for d in devices if isinstance(d, dict) and isinstance(d.get("uuid"), str)}
    for uuid in sorted({uuid for pair in agreed for uuid in pair} - named):
        found.note(f"{where}.devices", f"links name {uuid!r}, which is not a card of this node")
    ready = raw.get("ready", True)
    if not isinstance(ready, bool):
        found.note(f"{where}.ready", f"must be true or false, got {ready!r}")
    annotations = found.check(_strings, raw.get("annotations"), f"{where}.annotations")
    for field, message in node_field_problems(raw, where):
        found.note(field, message)
    found.raise_any()
    assert isinstance(name, str)
    return Node(
        name=name.strip(),
        cards=cards,
        annotations=annotations,
        ready=ready,
        links=links_to_pairs(given),
        **node_fields(raw),
    )


def parse_config(raw) -> ClusterConfig:
    """The scenario's `config`; raises ScenarioProblems with every bad field."""
    raw = _dict(raw, "config")
    found = Problems()
    node_policy = raw.get("node_scheduler_policy", "binpack")
    if node_policy not in ("binpack", "spread"):
        found.note("config.node_scheduler_policy", f"must be binpack or spread, got {node_policy!r}")
    gpu_policy = raw.get("gpu_scheduler_policy", "spread")
    if not isinstance(gpu_policy, str):
        found.note("config.gpu_scheduler_policy", f"must be a string, got {gpu_policy!r}")
    defaults = found.check(_dict, raw.get("resources"), "config.resources") or {}
    memory_percentage = found.check(
        _int, defaults.get("memory_percentage", 100), "config.resources.memory_percentage", minimum=1
    )
    cores = found.check(_int, defaults.get("cores", 0), "config.resources.cores")
    exclusive_cores = found.check(
        _int, defaults.get("exclusive_cores", 100), "config.resources.exclusive_cores"
    )
    found.raise_any()
    resources = ResourceDefaults(
        memory_percentage=memory_percentage, cores=cores, exclusive_cores=exclusive_cores
    )
    return ClusterConfig(
        node_scheduler_policy=node_policy, gpu_scheduler_policy=gpu_policy, resources=resources
    )


def _pod_name(found: Problems, raw: dict, where: str) -> tuple[object, object]:
    """A pod entry's `name` (required) and `namespace` (default `default`), each noted in
    `found` when it is not a non-empty string."""
    name = raw.get("name")
    if not isinstance(name, str) or not name:
        found.note(f"{where}.name", "required: a non-empty string")
    namespace = raw.get("namespace", "default")
    if not isinstance(namespace, str) or not namespace:
        found.note(f"{where}.namespace", "must be a non-empty string")
    return name, namespace


def parse_pod_entry(raw, where: str) -> PodSpec:
    """The envelope of a pod and its Kubernetes fields (SPEC 10, `engine.kubefields`). Bad GPU
    resource values are left for the engine, which rejects the pod (SPEC 9: a rejected pod is
    not a file error); raises ScenarioProblems with every bad field of the envelope and every
    malformed Kubernetes field (a cpu request `"4 cores"`, an unknown operator)."""
    if not isinstance(raw, dict):
        raise ScenarioError(where, "a pod must be an object")
    found = Problems()
    name, namespace = _pod_name(found, raw, where)
    containers = raw.get("containers")
    if not isinstance(containers, list) or not containers:
        found.note(f"{where}.containers", "required: a non-empty list of containers")
    inits = raw.get("initContainers") or []
    if not isinstance(inits, list):
        found.note(f"{where}.initContainers", "must be a list of containers")
    annotations = found.check(_dict, raw.get("annotations"), f"{where}.annotations")
    for field, message in pod_field_problems(raw, where):
        found.note(field, message)
    for field, message in pod_problems(raw, where):
        found.note(field, message)
    found.raise_any()
    assert isinstance(name, str) and isinstance(namespace, str) and isinstance(containers, list)
    return PodSpec(
        name=name,
        namespace=namespace,
        annotations=annotations,
        containers=containers,
        init_containers=inits,
        **pod_spec_fields(raw),
    )


def parse_running_pod(raw, where: str, nodes: dict[str, Node]) -> RunningPod:
    """One pod someone else bound (SPEC 10 `running`): its node must be in the scenario, and a
    `hami.io/vgpu-devices-allocated` it carries must decode and name that node's cards.
    Raises ScenarioProblems with every bad field."""
    if not isinstance(raw, dict):
        raise ScenarioError(where, "a running pod must be an object")
    found = Problems()
    name, namespace = _pod_name(found, raw, where)
    node = raw.get("node")
    if not isinstance(node, str) or not node:
        found.note(f"{where}.node", "required: the name of the node it runs on")
    elif node not in nodes:
        found.note(f"{where}.node", f"no node {node!r} in the scenario")
    annotations = found.check(_strings, raw.get("annotations"), f"{where}.annotations") or {}
    for field, message in running_pod_problems(raw, where):
        found.note(field, message)
    for field, message in pod_problems(raw, where, RUNNING_POD_KEYS):
        found.note(field, message)
    merged = held_allocation(annotations, ALLOCATED, ALLOCATED)
    if merged and merged != annotations.get(ALLOCATED, ""):
        # another family's cards (an Ascend chip's `-devices-allocated`): held as one string
        annotations = {**annotations, ALLOCATED: merged}
    allocated = annotations.get(ALLOCATED)
    if allocated is not None and isinstance(node, str) and node in nodes:
        found.check(_held_cards, allocated, f"{where}.annotations", nodes[node])
    found.raise_any()
    assert isinstance(name, str) and isinstance(namespace, str) and isinstance(node, str)
    return RunningPod(
        name=name,
        node=node,
        namespace=namespace,
        labels=dict(raw.get("labels") or {}),
        affinity=raw.get("affinity") or None,
        containers=list(raw.get("containers") or []),
        init_containers=list(raw.get("initContainers") or []),
        annotations=annotations,
    )


def _held_cards(allocated: str, where: str, node: Node) -> None:
    """The allocation annotation decodes and names only cards of `node`."""
    try:
        containers = decode_allocation(allocated)
    except ScenarioError as exc:
        raise ScenarioError(f"{where}.{exc.where}", exc.message) from None
    found = Problems()
    uuids = {card.uuid for card in node.cards}
    for ci, cards in enumerate(containers):
        for uuid, memory, cores in cards:
            at = f"{where}.{ALLOCATED}[{ci}]"
            if uuid not in uuids:
                found.note(at, f"{uuid!r} is not a card of node {node.name!r}")
            if memory < 0 or cores < 0:
                found.note(at, f"{uuid!r}: MEM and CORES must be >= 0")
    found.raise_any()


def parse_running(raw, nodes: dict[str, Node]) -> list[RunningPod]:
    """The scenario's `running` pods; raises ScenarioProblems with every bad entry's fields."""
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise ScenarioError("running", "must be a list of pods")
    found = Problems()
    running: list[RunningPod] = []
    seen: dict[str, int] = {}
    for i, entry in enumerate(raw):
        pod = found.check(parse_running_pod, entry, f"running[{i}]", nodes)
        if pod is None:
            continue
        if pod.key in seen:
            found.note(f"running[{i}].name", f"{pod.key!r} repeats running[{seen[pod.key]}]")
            continue
        seen[pod.key] = i
        running.append(pod)
    found.raise_any()
    return running


def parse_storage(raw: dict) -> volumes.Storage:
    """The scenario's `persistentVolumeClaims`, `persistentVolumes` and `storageClasses`
    (SPEC 10), what the pods' `volumes` are judged against (`VolumeBinding`); none given is an
    empty storage: a pod's claim is then not found."""
    try:
        return volumes.read_storage(raw)
    except PodInvalid as exc:
        raise ScenarioError(exc.field, exc.message) from None


def parse_scenario(raw) -> tuple[Cluster, ClusterConfig, list[PodSpec]]:
    """A scenario's cluster, config and pods. A malformed one raises ScenarioProblems naming
    every problem found (file order, config first), not only the first."""
    if not isinstance(raw, dict):
        raise ScenarioError("", "a scenario must be an object with nodes and pods")
    found = Problems()
    for required in ("nodes", "pods"):
        if required not in raw:
            found.note(required, "required")
        elif not isinstance(raw[required], list):
            found.note(required, "must be a list")
    config = found.check(parse_config, raw.get("config"))
    raw_nodes = raw["nodes"] if isinstance(raw.get("nodes"), list) else []
    nodes = [found.check(parse_node, node, f"nodes[{i}]") for i, node in enumerate(raw_nodes)]
    names: dict[str, int] = {}
    owner: dict[str, str] = {}
    for i, node in enumerate(nodes):
        if node is None:
            continue
        if node.name in names:
            found.note(f"nodes[{i}].name", f"{node.name!r} repeats nodes[{names[node.name]}]")
            continue
        names[node.name] = i
        for card in node.cards:
            if card.uuid in owner:
                found.note(
                    f"nodes[{i}].devices", f"duplicate card uuid {card.uuid!r} (also on {owner[card.uuid]})"
                )
                break
            owner[card.uuid] = node.name
    raw_pods = raw["pods"] if isinstance(raw.get("pods"), list) else []
    pods = [found.check(parse_pod_entry, pod, f"pods[{i}]") for i, pod in enumerate(raw_pods)]
    by_name = {node.name: node for node in nodes if node is not None}
    running = found.check(parse_running, raw.get("running"), by_name)
    storage = found.check(parse_storage, raw)
    if wants_batch(raw):
        found.check(check_batch, raw)
    found.raise_any()
    for pod in pods:
        if pod is not None and pod.volumes:
            pod.storage = storage
    cluster = Cluster(nodes, running or [])
    for pod, exc in account_running(cluster):  # checked above: a miss here is a rule out of step
        found.note(f"running[{cluster.running.index(pod)}].{exc.field}", exc.message)
    found.raise_any()
    return cluster, config, pods


def _json_error(where: str, exc: json.JSONDecodeError) -> ScenarioError:
    return ScenarioError(where, f"not valid JSON: {exc.msg} at line {exc.lineno}, column {exc.colno}")


def _yaml_at(exc: yaml.YAMLError) -> str:
    mark = getattr(exc, "problem_mark", None)
    return f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""


def read_scenario_text(text: str, where: str = "scenario"):
    """A scenario as JSON, or YAML when it is not JSON (pasted text has no extension).
    Raises ScenarioError saying where."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        if text.lstrip().startswith(("{", "[")):
            raise _json_error(where, exc) from None
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ScenarioError(where, f"neither JSON nor valid YAML{_yaml_at(exc)}") from None


def read_scenario_file(path: str | Path):
    """The scenario in a file, as read: JSON, or YAML by extension. Raises ScenarioError for
    unreadable or malformed files."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ScenarioError(str(path), f"cannot read: {exc.strerror}") from None
    if path.suffix.lower() in (".yaml", ".yml"):
        try:
            raw = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise ScenarioError(str(path), f"not valid YAML{_yaml_at(exc)}") from None
    else:
        try:
            raw = json.loads(text)
        except json.JSONDecodeError as exc:
            raise _json_error(str(path), exc) from None
    return raw


def load_scenario_file(path: str | Path):
    """`read_scenario_file`, parsed (`parse_scenario`)."""
    return parse_scenario(read_scenario_file(path))


def run_scenario(
    raw, top: int | None = None, rules: Rules | None = None, consolidation: bool = False
) -> dict:
    """Schedule the pods in order, each seeing the placements before it; SPEC 9's output. A
    batch scenario (queues, groups, priorities, tenants: `wants_batch`) is decided as one live
    cycle instead (`engine.batch.scenario`), under `rules` and `consolidation` (the server's
    preemption options; the scenario's `preemption` overrides them)."""
    if wants_dra(raw):  # ResourceSlices and claims in their API form (engine.dra.scenario)
        return run_dra_scenario(raw, top, config=parse_config(raw.get("config")))
    cluster, config, pods = parse_scenario(raw)
    if wants_batch(raw):
        return run_batch_scenario(
            raw, cluster, config, pods, top=top, rules=rules, consolidation=consolidation
        )
    return {"pods": schedule_in_order(cluster, config, pods, top)}


def schedule_in_order(
    cluster: Cluster, config: ClusterConfig, pods: list[PodSpec], top: int | None = None
) -> list[dict]:
    """Each pod decided and placed in file order (SPEC 9), as decision dicts: a placed pod's
    claims are bound before the next pod is decided (VolumeBinding's PreBind), so two pods
    never count on one volume."""
    # what the output shows (the `top` nodes) is all a decision keeps
    scheduler = Scheduler(cluster, config, keep=None if top is None else max(1, top))
    out = []
    for pod in pods:
        decision = scheduler.schedule(pod)
        if decision.node and pod.volumes and isinstance(pod.storage, volumes.Storage):
            node = cluster.node(decision.node)
            claims = volumes.resolve(pod.namespace, pod.name, pod.volumes, pod.storage)
            volumes.bind(pod.storage, claims, node.name, node.labels)
        out.append(decision.as_dict(top=top))
    return out
