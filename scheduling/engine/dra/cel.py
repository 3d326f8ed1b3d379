"""CEL device selectors, evaluated with `common-expression-language` (the `cel` module).

Why this library: it is the maintained Rust implementation (cel-rust) behind Python bindings;
a compiled selector runs in 1-5 us against a device, where `cel-python` (pure Python) takes
250-550 us, and both cover the standard language (`startsWith`, `in`, `has`, maps, macros).
Neither ships Kubernetes' CEL extensions, so the ones DRA selectors use are defined here:

- `quantity(s)`, `isQuantity(s)`, and on quantities `compareTo`, `isGreaterThan`,
  `isLessThan`, `asInteger`, `asApproximateFloat`, `isInteger`, `sign`, `add`, `sub`;
- `semver(s)`, `isSemver(s)`, and on versions `compareTo`, `isGreaterThan`, `isLessThan`,
  `major`, `minor`, `patch`.

A quantity is a map `{"__quantity": "<exact decimal>"}` and a version `{"__semver": "x.y.z"}`
inside the expression: only these functions look into them. `device.capacity[d].memory` is
such a quantity, a `version` attribute such a version, as in Kubernetes.

Any failure (a syntax error, an unknown function or key, a result that is not a bool) raises
`CelError` naming the expression: the pod waits with that reason, nothing is guessed. Like
kube-scheduler, a missing attribute is an error, not a mismatch (`has()` or `in` avoid it).
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from ..quantity import parse
from .inventory import DraDevice, Version

if TYPE_CHECKING:
    import cel

QUANTITY, SEMVER = "__quantity", "__semver"
_SEMVER = re.compile(r"^v?(\d+)\.(\d+)\.(\d+)(?:-([0-9A-Za-z.-]+))?(?:\+[0-9A-Za-z.-]+)?$")


class CelError(Exception):
    """A selector could not be evaluated; the message names the expression."""

    def __init__(self, expression: str, why: str):
        super().__init__(f"CEL selector {expression!r} cannot be evaluated: {why}")
        self.expression = expression


def _quantity(text) -> dict:
    amount = parse(text)
    if amount is None:
        raise ValueError(f"not a quantity: {text!r}")
    return {QUANTITY: str(amount)}


def _semver(text) -> dict:
    if not isinstance(text, str) or not _SEMVER.match(text):
        raise ValueError(f"not a semantic version: {text!r}")
    return {SEMVER: text}


def _version_key(text: str) -> tuple:
    found = _SEMVER.match(text)
    if found is None:
        raise ValueError(f"not a semantic version: {text!r}")
    major, minor, patch, pre = found.groups()
    # a pre-release sorts before its release; its parts compare as semver says
    parts = tuple((0, int(p), "") if p.isdigit() else (1, 0, p) for p in (pre or "").split(".") if p)
    return int(major), int(minor), int(patch), 0 if pre else 1, parts


def _value(value) -> tuple[str, object]:
    if isinstance(value, dict) and QUANTITY in value:
        return QUANTITY, Decimal(value[QUANTITY])
    if isinstance(value, dict) and SEMVER in value:
        return SEMVER, _version_key(value[SEMVER])
    raise ValueError(f"not a quantity or a version: {value!r}")


def _compare(a, b) -> int:
    kind_a, left = _value(a)
    kind_b, right = _value(b)
    if kind_a != kind_b:
        raise ValueError("compareTo of a quantity with a version")
    return (left > right) - (left < right)  # type: ignore[operator]


def _amount(value) -> Decimal:
    kind, amount = _value(value)
    if kind != QUANTITY:
        raise ValueError("not a quantity")
    return amount  # type: ignore[return-value]


FUNCTIONS: dict[str, Callable[..., Any]] = {
    "quantity": _quantity,
    "isQuantity": lambda text: parse(text) is not None,
    "semver": _semver,
    "isSemver": lambda text: isinstance(text, str) and bool(_SEMVER.match(text)),
    "compareTo": _compare,
    "isGreaterThan": lambda a, b: _compare(a, b) > 0,
    "isLessThan": lambda a, b: _compare(a, b) < 0,
    "asInteger": lambda q: int(_amount(q)),
    "asApproximateFloat": lambda q: float(_amount(q)),
    "isInteger": lambda q: _amount(q) == _amount(q).to_integral_value(),
    "sign": lambda q: (_amount(q) > 0) - (_amount(q) < 0),
    "add": lambda a, b: {QUANTITY: str(_amount(a) + _amount(b))},
    "sub": lambda a, b: {QUANTITY: str(_amount(a) - _amount(b))},
    "major": lambda v: _version_key(v[SEMVER])[0],
    "minor": lambda v: _version_key(v[SEMVER])[1],
    "patch": lambda v: _version_key(v[SEMVER])[2],
}


def _cel_value(value):
    if isinstance(value, Version):
        return {SEMVER: value.text}
    if isinstance(value, list):
        return [_cel_value(v) for v in value]
    return value


def device_input(device: DraDevice) -> dict:
    """`device` as a selector reads it: driver, attributes and capacity by domain, and
    `allowMultipleAllocations`."""
    attributes: dict[str, dict] = {}
    for (domain, ident), value in device.attributes.items():
        attributes.setdefault(domain, {})[ident] = _cel_value(value)
    capacity: dict[str, dict] = {}
    for (domain, ident), amount in device.capacity.items():
        capacity.setdefault(domain, {})[ident] = {QUANTITY: str(amount)}
    return {
        "driver": device.driver,
        "attributes": attributes,
        "capacity": capacity,
        "allowMultipleAllocations": device.shareable,
    }


def _library():
    """The CEL library, imported on first use: it imports a command line (prompt_toolkit) too,
    ~0.12 s that a scenario or a cycle without claims need not pay."""
    import cel

    return cel


class Selectors:
    """Compiled expressions and per-device contexts, kept across pods (both are pure)."""

    def __init__(self):
        self._programs: dict[str, object] = {}
        self._contexts: dict[tuple[str, str, str], cel.Context] = {}
        self._lock = threading.Lock()

    def program(self, expression: str):
        found = self._programs.get(expression)
        if found is None:
            try:
                found = _library().compile(expression)
            except Exception as exc:  # noqa: BLE001 - the library's own error types
                raise CelError(expression, str(exc).splitlines()[0]) from exc
            self._programs[expression] = found
        return found

    def _context(self, device: DraDevice) -> cel.Context:
        context = self._contexts.get(device.key)
        if context is None:
            context = _library().Context()
            context.add_variable("device", device_input(device))
            for name, function in FUNCTIONS.items():
                context.add_function(name, function)
            self._contexts[device.key] = context
        return context

    def matches(self, expression: str, device: DraDevice) -> bool:
        """Whether `device` satisfies `expression`; CelError when it cannot be told."""
        program = self.program(expression)
        with self._lock:  # a cel.Context is not thread-safe
            try:
                result = program.execute(self._context(device))  # type: ignore[attr-defined]
            except Exception as exc:  # noqa: BLE001 - the library's own error types
                why = f"{type(exc).__name__}: {exc}".splitlines()[0]
                raise CelError(expression, f"on device {device.name}: {why}") from exc
        if not isinstance(result, bool):
            raise CelError(expression, f"gave {result!r}, not a bool")
        return result
