"""Kubernetes ResourceQuota objects into namespace quotas on HAMi's resources.

HAMi's users cap a namespace with a ResourceQuota on `nvidia.com/gpu`, `nvidia.com/gpumem`
and `nvidia.com/gpucores` (bare, or with `requests.`/`limits.`). Kubernetes counts those per
container as declared, so a 2-card 4000 MiB ask counts 4000; the cycle counts what the
placement holds (8000 MiB) and refuses with `NamespaceQuotaExceeded`. This module only keeps
the `NamespaceQuota` rows equal to the objects (through `services.store_namespace_quota` and
`forget_namespace_quotas`): one row per (namespace, quota, resource),
the tighter value when one quota names a resource twice, and no row for a quota that is gone.
Those rows are marked `source="kubernetes"`; quotas made through the REST API or the admin
(`source="api"`) are never read, changed nor deleted here, even under the same name.

A quantity is a whole count: `4`, `3k`, `2M`, `1e3` (the API server writes 2000000 as `2M`).
A byte quantity (`16Gi`), a fraction or a milli value (`500m`) is refused naming the field
(`spec.hard.requests.nvidia.com/gpumem`), and the row stored for it before, if any, is kept:
a typo never lifts a quota. Quotas with `scopes` or a `scopeSelector` apply to some pods
only; hamiadmin cannot tell which, so it does not enforce them (Kubernetes still does, at
admission).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from hamiadmin.hamiconfig import current
from scheduling import services
from scheduling.engine.batch.queues import quota_resource
from scheduling.models import NamespaceQuota
from scheduling.storable import printable, why_unstorable

from . import pods as pod_objects
from .informer import Handler, cache_key
from .sync import Refusals, always

log = logging.getLogger("hamiadmin.kube.quotas")

#: `Event.reason` of a ResourceQuota (or an entry of it) that cannot be read.
QUOTA_REFUSED = "ResourceQuotaInvalid"
_BINARY = ("Ki", "Mi", "Gi", "Ti", "Pi", "Ei")


def whole_count(value) -> int:
    """A quantity of HAMi's resources as a count; raises ValueError saying why it is not one."""
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise ValueError(f"must be a quantity (a string or a whole number), got {type(value).__name__}")
    if isinstance(value, str):
        text = value.strip()
        if text.endswith(_BINARY):
            raise ValueError(
                f"{text[:40]!r} is a quantity of bytes; HAMi's resources count cards, MiB and percent:"
                " write a plain number"
            )
        read = pod_objects.quantity(text)
        if not isinstance(read, int) or text.endswith(("m", "u", "n")):
            raise ValueError(f"must be a whole number, got {text[:40]!r}")
        value = read
    if value < 0 or value > pod_objects.LARGEST_QUANTITY:
        raise ValueError(f"must be between 0 and {pod_objects.LARGEST_QUANTITY}, got {value}")
    return value


def subject_of(obj: dict) -> str:
    namespace, name = cache_key(obj)
    return printable(f"resourcequota/{namespace}/{name}")


def scoped(obj: dict) -> bool:
    found = obj.get("spec")
    spec: dict = found if isinstance(found, dict) else {}
    return bool(spec.get("scopes") or spec.get("scopeSelector"))


def quota_limits(obj: dict, memory_factor: int = 1) -> tuple[dict[str, int], dict[str, str]]:
    """(limits, refused) of one ResourceQuota: `spec.hard` on HAMi's resources by queue resource
    (`vgpus`, `gpumem` in MiB, `gpucores`), and the entries that cannot be read (field -> why).
    `gpumem` counts units of HAMi's `memoryFactor` MiB, as in pods: HAMi multiplies the limit
    by it too (`FitQuota`)."""
    found = obj.get("spec")
    spec: dict = found if isinstance(found, dict) else {}
    found = spec.get("hard")
    hard: dict = found if isinstance(found, dict) else {}
    limits: dict[str, int] = {}
    refused: dict[str, str] = {}
    for key, value in hard.items():
        resource = quota_resource(key) if isinstance(key, str) else None
        if resource is None:
            continue
        try:
            count = whole_count(value)
        except ValueError as exc:
            refused[f"spec.hard.{key}"] = str(exc)
            continue
        if resource == "gpumem":
            count = min(count * memory_factor, pod_objects.LARGEST_QUANTITY)
        limits[resource] = min(count, limits.get(resource, count))
    return limits, refused


def readable_name(obj: dict) -> bool:
    namespace, name = cache_key(obj)
    return all(
        isinstance(text, str) and text and not why_unstorable(text) and len(text) <= limit
        for text, limit in ((namespace, 63), (name, 253))
    )


class QuotaSync(Handler):
    """ResourceQuota objects (all namespaces) into `NamespaceQuota` rows; refused entries are
    said out loud (`Refusals`, as pods and nodes are)."""

    def __init__(self, may_write: Callable[[], bool] = always, refusals: Refusals | None = None):
        self.may_write = may_write
        self.refusals = refusals or Refusals()

    def changed(self, kind: str, obj: dict) -> None:
        if not self.may_write() or not readable_name(obj):
            return
        if kind == "DELETED":
            services.store_namespace_quota(*cache_key(obj), {})
            return
        self.apply(obj)

    def synced(self, objects: list[dict], listed: bool) -> None:
        """Apply what differs from the rows, and drop the rows of quotas no longer listed (the
        cache is the whole list, after a list or a resync alike)."""
        if not self.may_write():
            return
        stored: dict[tuple[str, str], dict[str, int]] = {}
        for namespace, quota, resource, hard in NamespaceQuota.objects.filter(
            source=NamespaceQuota.KUBERNETES
        ).values_list("namespace", "quota", "resource", "hard"):
            stored.setdefault((namespace, quota), {})[resource] = hard
        present = set()
        for obj in objects:
            if not readable_name(obj):
                continue
            key = cache_key(obj)
            present.add(key)
            try:
                self.apply(obj, stored.get(key, {}))
            except Exception:  # noqa: BLE001 - one quota must not stop the others
                log.exception("resource quota %s could not be applied", subject_of(obj))
        services.forget_namespace_quotas(present)

    def apply(self, obj: dict, stored: dict[str, int] | None = None) -> None:
        namespace, name = cache_key(obj)
        limits: dict[str, int]
        refused: dict[str, str]
        if scoped(obj):
            limits, refused = {}, {}
        else:
            limits, refused = quota_limits(obj, current().memory_factor)
        keep = {quota_resource(field.removeprefix("spec.hard.")) for field in refused}
        if refused:
            message = "; ".join(f"{field}: {why}" for field, why in sorted(refused.items()))
            self.refusals.refuse(subject_of(obj), QUOTA_REFUSED, message)
        else:
            self.refusals.accepted(subject_of(obj))
        if stored is not None and not keep and stored == limits:
            return
        services.store_namespace_quota(namespace, name, limits, frozenset(keep))
