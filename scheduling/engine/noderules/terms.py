"""The Kubernetes matching vocabulary the node rules share, read and validated once per pod:
node selector terms (`NodeAffinity`), label selectors (pod affinity, topology spread),
tolerations against taints (`TaintToleration`, `NodeUnschedulable`).

Each reader raises PodInvalid naming the field (an unknown operator, an effect `NoRun`);
each matcher is a pure function of what it was built from, with kube-scheduler's semantics
(`k8s.io/component-helpers/scheduling/corev1`, `apimachinery/pkg/labels`).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import PodInvalid

NO_SCHEDULE, PREFER_NO_SCHEDULE, NO_EXECUTE = "NoSchedule", "PreferNoSchedule", "NoExecute"
EFFECTS = (NO_SCHEDULE, PREFER_NO_SCHEDULE, NO_EXECUTE)
NODE_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt")
LABEL_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist")
NAME_FIELD = "metadata.name"


def _dict(value, where: str) -> dict:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise PodInvalid(where, f"must be an object, got {type(value).__name__}")
    return value


def _list(value, where: str) -> list:
    if value is None:
        return []
    if not isinstance(value, list):
        raise PodInvalid(where, f"must be a list, got {type(value).__name__}")
    return value


def _text(value, where: str, empty: bool = True) -> str:
    if value is None:
        value = ""
    if not isinstance(value, str) or (not empty and not value):
        raise PodInvalid(where, f"must be a{'' if empty else ' non-empty'} string, got {value!r}")
    return value


def string_map(value, where: str) -> dict[str, str]:
    """A map of strings to strings (`nodeSelector`, `matchLabels`, `labels`)."""
    out = {}
    for key, item in _dict(value, where).items():
        out[_text(key, where, empty=False)] = _text(item, f"{where}.{key}")
    return out


# --- Node selector terms -------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Requirement:
    """One `matchExpressions`/`matchFields` entry: key, operator, values."""

    key: str
    operator: str
    values: tuple[str, ...]

    def matches(self, labels: dict[str, str]) -> bool:
        op = self.operator
        present = self.key in labels
        if op == "Exists":
            return present
        if op == "DoesNotExist":
            return not present
        if op == "NotIn":
            return not present or labels[self.key] not in self.values
        if not present:
            return False
        value = labels[self.key]
        if op == "In":
            return value in self.values
        try:  # Gt / Lt: both sides whole numbers, else no match
            have, bound = int(value), int(self.values[0])
        except ValueError:
            return False
        return have > bound if op == "Gt" else have < bound


def _requirement(entry, where: str, operators: tuple[str, ...]) -> Requirement:
    entry = _dict(entry, where)
    key = _text(entry.get("key"), f"{where}.key", empty=False)
    op = entry.get("operator")
    if op not in operators:
        raise PodInvalid(f"{where}.operator", f"must be one of {', '.join(operators)}, got {op!r}")
    values = tuple(
        _text(v, f"{where}.values[{i}]") for i, v in enumerate(_list(entry.get("values"), f"{where}.values"))
    )
    if op in ("In", "NotIn") and not values:
        raise PodInvalid(f"{where}.values", f"operator {op} needs at least one value")
    if op in ("Exists", "DoesNotExist") and values:
        raise PodInvalid(f"{where}.values", f"operator {op} takes no values")
    if op in ("Gt", "Lt"):
        if len(values) != 1:
            raise PodInvalid(f"{where}.values", f"operator {op} takes exactly one value")
        try:
            int(values[0])
        except ValueError:
            raise PodInvalid(
                f"{where}.values[0]", f"operator {op} needs a whole number, got {values[0]!r}"
            ) from None
    return Requirement(key, op, values)


@dataclass(frozen=True, slots=True)
class NodeTerm:
    """One `nodeSelectorTerms` entry: its expressions (labels) and fields (the node's name),
    ANDed. A term with neither matches no node, as Kubernetes reads it."""

    expressions: tuple[Requirement, ...]
    fields: tuple[Requirement, ...]

    def matches(self, name: str, labels: dict[str, str]) -> bool:
        if not self.expressions and not self.fields:
            return False
        if not all(r.matches(labels) for r in self.expressions):
            return False
        by_field = {NAME_FIELD: name}
        return all(r.matches(by_field) for r in self.fields)


def node_term(entry, where: str) -> NodeTerm:
    entry = _dict(entry, where)
    expressions = tuple(
        _requirement(e, f"{where}.matchExpressions[{i}]", NODE_OPERATORS)
        for i, e in enumerate(_list(entry.get("matchExpressions"), f"{where}.matchExpressions"))
    )
    fields = []
    for i, e in enumerate(_list(entry.get("matchFields"), f"{where}.matchFields")):
        requirement = _requirement(e, f"{where}.matchFields[{i}]", ("In", "NotIn"))
        if requirement.key != NAME_FIELD:
            raise PodInvalid(
                f"{where}.matchFields[{i}].key", f"only {NAME_FIELD} is supported, got {requirement.key!r}"
            )
        fields.append(requirement)
    return NodeTerm(expressions, tuple(fields))


def node_terms(value, where: str) -> tuple[NodeTerm, ...]:
    """`nodeSelectorTerms` (ORed)."""
    return tuple(node_term(t, f"{where}[{i}]") for i, t in enumerate(_list(value, where)))


# --- Label selectors -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class LabelSelector:
    """A `metav1.LabelSelector`: `matchLabels` and `matchExpressions`, ANDed; an empty
    selector matches every pod (an absent one is None and matches none, as the callers say)."""

    labels: tuple[tuple[str, str], ...]
    expressions: tuple[Requirement, ...]

    def matches(self, labels: dict[str, str]) -> bool:
        for key, value in self.labels:
            if labels.get(key) != value:
                return False
        return all(r.matches(labels) for r in self.expressions)

    def with_labels(self, pairs: tuple[tuple[str, str], ...]) -> LabelSelector:
        """This selector with more `matchLabels` (what `matchLabelKeys` adds)."""
        return LabelSelector(self.labels + pairs, self.expressions) if pairs else self


def label_selector(value, where: str) -> LabelSelector | None:
    if value is None:
        return None
    value = _dict(value, where)
    labels = tuple(sorted(string_map(value.get("matchLabels"), f"{where}.matchLabels").items()))
    expressions = tuple(
        _requirement(e, f"{where}.matchExpressions[{i}]", LABEL_OPERATORS)
        for i, e in enumerate(_list(value.get("matchExpressions"), f"{where}.matchExpressions"))
    )
    return LabelSelector(labels, expressions)


# --- Taints and tolerations ------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Toleration:
    """One toleration: `Exists` tolerates any value of `key` (every key when empty), `Equal`
    (the default) the one `value`; an empty `effect` tolerates every effect."""

    key: str
    operator: str
    value: str
    effect: str

    def tolerates(self, taint: dict) -> bool:
        if self.effect and self.effect != taint.get("effect"):
            return False
        if self.key and self.key != taint.get("key"):
            return False
        if self.operator == "Exists":
            return True
        return self.value == (taint.get("value") or "")


def tolerations(value, where: str) -> tuple[Toleration, ...]:
    out = []
    for i, entry in enumerate(_list(value, where)):
        at = f"{where}[{i}]"
        entry = _dict(entry, at)
        key = _text(entry.get("key"), f"{at}.key")
        operator = entry.get("operator") or "Equal"
        if operator not in ("Equal", "Exists"):
            raise PodInvalid(f"{at}.operator", f"must be Equal or Exists, got {operator!r}")
        value_ = _text(entry.get("value"), f"{at}.value")
        if operator == "Exists" and value_:
            raise PodInvalid(f"{at}.value", "must be empty when the operator is Exists")
        if not key and operator != "Exists":
            raise PodInvalid(f"{at}.operator", "must be Exists when the key is empty")
        effect = entry.get("effect") or ""
        if effect and effect not in EFFECTS:
            raise PodInvalid(f"{at}.effect", f"must be one of {', '.join(EFFECTS)} or empty, got {effect!r}")
        out.append(Toleration(key, operator, value_, effect))
    return tuple(out)


def untolerated(taints: list[dict], held: tuple[Toleration, ...], effects: tuple[str, ...]) -> dict | None:
    """The first of `taints` with one of `effects` that none of `held` tolerates, or None."""
    for taint in taints:
        if taint.get("effect") in effects and not any(t.tolerates(taint) for t in held):
            return taint
    return None


def taint_words(taint: dict) -> str:
    """`{key: value}`, as kube-scheduler names a taint."""
    return f"{{{taint.get('key', '')}: {taint.get('value') or ''}}}"


def check_taints(taints, where: str) -> list[dict]:
    """A node's taints validated (for the readers of nodes: scenarios, the pipeline)."""
    out = []
    for i, entry in enumerate(_list(taints, where)):
        at = f"{where}[{i}]"
        entry = _dict(entry, at)
        key = _text(entry.get("key"), f"{at}.key", empty=False)
        effect = entry.get("effect")
        if effect not in EFFECTS:
            raise PodInvalid(f"{at}.effect", f"must be one of {', '.join(EFFECTS)}, got {effect!r}")
        out.append({"key": key, "value": _text(entry.get("value"), f"{at}.value"), "effect": effect})
    return out
