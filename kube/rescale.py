"""Owner scale changes reach their gangs without waiting for a new pod (docs/queues.md, *Gangs
from owners*): at each resync the agent reads again, through `OwnerGangs.gang_of` and its
cache (an owner is GET again once its cached copy is `ttl` old), the top controller of one
unfinished member of every gang found from owners, and a changed count or set of parts is
written to the group (`services.rescale_owner_gang`: `min_member`, `subgroups`, an
`OwnerScaled` condition). A Job's parallelism raised from 4 to 6 makes its gang wait for 6; a
JobSet scaled down lets the gang start with what is left. An owner that cannot be read is left
to the pod path, which refuses its pods naming the field."""

from __future__ import annotations

import logging
from collections.abc import Callable

from scheduling import services
from scheduling.models import Pod, PodGroup

from .owners import OwnerGangs, OwnerInvalid, OwnerUnavailable

log = logging.getLogger("hamiadmin.kube.rescale")


def rescale_owner_gangs(owners: OwnerGangs, pod_of: Callable[[str, str], dict | None]) -> list[str]:
    """Resize every gang found from owners whose owner now says another count or other parts;
    `pod_of(namespace, name)` is the watched pod. The keys of the gangs resized."""
    members: dict[int, tuple[str, str]] = {}
    for group_id, namespace, name in (
        Pod.objects.filter(group__source="owner")
        .exclude(status__in=(*Pod.FINISHED, Pod.REJECTED))
        .exclude(group__phase=PodGroup.COMPLETED)
        .order_by("group_id", "pk")
        .values_list("group_id", "namespace", "name")
    ):
        members.setdefault(group_id, (namespace, name))
    names = dict(PodGroup.objects.filter(pk__in=list(members)).values_list("pk", "name"))
    resized = []
    for group_id, (namespace, name) in members.items():
        obj = pod_of(namespace, name)
        if obj is None:
            continue
        try:
            ref = owners.gang_of(obj)
        except (OwnerInvalid, OwnerUnavailable) as exc:
            log.info("gang of %s/%s not re-read: %s", namespace, name, exc)
            continue
        if ref is None or ref.name != names.get(group_id) or ref.min_member is None:
            continue
        subgroups = [{"name": part, "min_member": least} for part, least in ref.subgroups]
        said = f"{ref.owner_kind} {ref.owner_name} scaled"
        if services.rescale_owner_gang(group_id, ref.min_member, subgroups, said):
            resized.append(f"{namespace}/{ref.name}")
    if resized:
        log.info("gangs resized by their owners: %s", ", ".join(resized))
    return resized
