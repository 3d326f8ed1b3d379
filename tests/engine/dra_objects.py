"""DRA objects in the API's own form, as HAMi's DRA driver and HAMi-DRA's webhook write them."""

from __future__ import annotations

HAMI = "hami-core-gpu.project-hami.io"
CLASS = HAMI
GIB = 2**30


def hami_slice(
    node: str, cards: int = 2, memory_gib: int = 16, product: str = "NVIDIA A100", **extra
) -> dict:
    """One node's ResourceSlice as HAMi's driver publishes it: `hami-gpu-<minor>` devices with
    uuid/minor/productName/pcieRoot attributes, `cores` and `memory` capacity, shareable."""
    devices = []
    for minor in range(cards):
        devices.append(
            {
                "name": f"hami-gpu-{minor}",
                "allowMultipleAllocations": True,
                "attributes": {
                    "type": {"string": "hami-gpu"},
                    "uuid": {"string": f"GPU-{node}-{minor}"},
                    "minor": {"int": minor},
                    "productName": {"string": product},
                    "driverVersion": {"version": "550.54.15"},
                    "resource.kubernetes.io/pcieRoot": {"string": f"pci0000:{minor // 2:02x}"},
                },
                "capacity": {
                    "cores": {
                        "value": "100",
                        "requestPolicy": {"validRange": {"min": "0", "max": "100", "step": "1"}},
                    },
                    "memory": {
                        "value": str(memory_gib * GIB),
                        "requestPolicy": {
                            "default": str(memory_gib * GIB),
                            "validRange": {"min": "1Mi", "step": "1Mi"},
                        },
                    },
                },
                **extra.get("device", {}),
            }
        )
    pool = extra.get("pool", {"name": node, "generation": 1, "resourceSliceCount": 1})
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": extra.get("name", f"{node}-{HAMI}")},
        "spec": {"driver": HAMI, "nodeName": node, "pool": pool, "devices": devices},
    }


def device_class(name: str = CLASS, expression: str | None = None) -> dict:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": name},
        "spec": {"selectors": [{"cel": {"expression": expression or f'device.driver == "{HAMI}"'}}]},
    }


def gpumem_claim(
    name: str,
    memory_mib: int = 8000,
    cores: int | None = None,
    count: int = 1,
    namespace: str = "default",
    selectors=(),
    constraints=(),
) -> dict:
    """The claim HAMi-DRA's webhook makes of `nvidia.com/gpu: count, nvidia.com/gpumem: memory`."""
    requests = {"memory": f"{memory_mib}Mi"}
    if cores is not None:
        requests["cores"] = str(cores)
    exactly = {"deviceClassName": CLASS, "count": count, "capacity": {"requests": requests}}
    if selectors:
        exactly["selectors"] = [{"cel": {"expression": e}} for e in selectors]
    devices: dict = {"requests": [{"name": "gpu", "exactly": exactly}]}
    if constraints:
        devices["constraints"] = list(constraints)
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"devices": devices},
    }


def allocated(claim: dict, node: str, device: str, memory_mib: int, share_id: str = "", **reserved) -> dict:
    """`claim` as another scheduler left it: allocated on `node`'s HAMi `device` with
    `memory_mib` consumed (and a `shareID` when given), reserved for `reserved` (name, uid)."""
    result = {"request": "gpu", "driver": HAMI, "pool": node, "device": device}
    if share_id:
        result["shareID"] = share_id
    result["consumedCapacity"] = {"memory": f"{memory_mib}Mi", "cores": "0"}
    terms = [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}]
    claim["status"] = {
        "allocation": {"devices": {"results": [result]}, "nodeSelector": {"nodeSelectorTerms": terms}}
    }
    if reserved:
        claim["status"]["reservedFor"] = [{"resource": "pods", **reserved}]
    return claim


def claim_pod(
    name: str,
    claim: str,
    namespace: str = "default",
    annotations: dict | None = None,
    scheduler: str = "hami-scheduler",
) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": f"uid-{name}",
            "annotations": dict(annotations or {}),
        },
        "spec": {
            "schedulerName": scheduler,
            "resourceClaims": [{"name": "gpu", "resourceClaimName": claim}],
            "containers": [{"name": "main", "image": "cuda", "resources": {"claims": [{"name": "gpu"}]}}],
        },
        "status": {"phase": "Pending"},
    }


NVIDIA = "gpu.nvidia.com"
#: An A100-40GB's MIG partitions, as (profile, memory GiB, multiprocessors, the memory slices
#: of each placement): 7 `1g.5gb`, 3 `2g.10gb`, 2 `3g.20gb`.
MIG_PROFILES = (
    ("1g.5gb", 5, 14, [[i] for i in range(7)]),
    ("2g.10gb", 10, 28, [[0, 1], [2, 3], [4, 5]]),
    ("3g.20gb", 20, 42, [[0, 1, 2, 3], [4, 5, 6, 7]]),
)


def mig_slices(node: str, gpus: int = 1, together: bool = False) -> list[dict]:
    """One node's pool as NVIDIA's DRA driver publishes dynamic MIG (KEP-4815): per GPU a
    counter set `gpu-<i>-counter-set` (`multiprocessors` 98 and one `memory-slice-<n>` per
    eighth of its memory) in a ResourceSlice of its own, and the devices in another: the whole
    GPU `gpu-<i>` drawing every counter, and each MIG placement `gpu-<i>-mig-<profile>-<n>`
    drawing its slices and multiprocessors. `together`: counters and devices in one slice, as
    1.32-1.33 published them."""
    counter_sets, devices = [], []
    for gpu in range(gpus):
        counter_set = f"gpu-{gpu}-counter-set"
        every = {f"memory-slice-{n}": {"value": "1"} for n in range(8)}
        counter_sets.append({"name": counter_set, "counters": {**every, "multiprocessors": {"value": "98"}}})
        common = {
            "productName": {"string": "NVIDIA A100-SXM4-40GB"},
            "resource.kubernetes.io/pcieRoot": {"string": f"pci0000:{gpu:02x}"},
        }
        devices.append(
            {
                "name": f"gpu-{gpu}",
                "attributes": {
                    **common,
                    "type": {"string": "gpu"},
                    "uuid": {"string": f"GPU-{node}-{gpu}"},
                    "minor": {"int": gpu},
                },
                "capacity": {"memory": {"value": "40Gi"}, "multiprocessors": {"value": "98"}},
                "consumesCounters": [
                    {"counterSet": counter_set, "counters": {**every, "multiprocessors": {"value": "98"}}}
                ],
            }
        )
        for profile, gib, sms, placements in MIG_PROFILES:
            for n, memory_slices in enumerate(placements):
                drawn = {f"memory-slice-{s}": {"value": "1"} for s in memory_slices}
                devices.append(
                    {
                        "name": f"gpu-{gpu}-mig-{profile}-{n}",
                        "attributes": {
                            **common,
                            "type": {"string": "mig"},
                            "profile": {"string": profile},
                            "parentUUID": {"string": f"GPU-{node}-{gpu}"},
                        },
                        "capacity": {"memory": {"value": f"{gib}Gi"}, "multiprocessors": {"value": str(sms)}},
                        "consumesCounters": [
                            {
                                "counterSet": counter_set,
                                "counters": {**drawn, "multiprocessors": {"value": str(sms)}},
                            }
                        ],
                    }
                )

    def one(name: str, count: int, **body) -> dict:
        return {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceSlice",
            "metadata": {"name": name},
            "spec": {
                "driver": NVIDIA,
                "nodeName": node,
                "pool": {"name": node, "generation": 1, "resourceSliceCount": count},
                **body,
            },
        }

    if together:
        return [one(f"{node}-{NVIDIA}", 1, sharedCounters=counter_sets, devices=devices)]
    return [
        one(f"{node}-{NVIDIA}-counters", 2, sharedCounters=counter_sets),
        one(f"{node}-{NVIDIA}-devices", 2, devices=devices),
    ]


def nvidia_class(name: str, kind: str) -> dict:
    """NVIDIA's DeviceClasses: `gpu.nvidia.com` (whole GPUs) and `mig.nvidia.com` (partitions)."""
    return device_class(
        name, f"device.driver == '{NVIDIA}' && device.attributes['{NVIDIA}'].type == '{kind}'"
    )


def device_claim(
    name: str, device_class_name: str, count: int = 1, selectors=(), namespace="default"
) -> dict:
    """A claim for `count` whole devices of a class (no capacity asked)."""
    exactly: dict = {"deviceClassName": device_class_name, "count": count}
    if selectors:
        exactly["selectors"] = [{"cel": {"expression": e}} for e in selectors]
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": exactly}]}},
    }


def scenario_of(objects) -> dict:
    """A DRA scenario (`simulate`) of what a server holds: `objects(kind)` lists a kind's
    objects (`apiserver.all`); pods oldest first, as the live cycle and pass take them."""
    return {
        "resourceSlices": objects("resourceslices"),
        "deviceClasses": objects("deviceclasses"),
        "resourceClaims": objects("resourceclaims"),
        "pods": sorted(
            objects("pods"), key=lambda p: p["metadata"]["creationTimestamp"] + p["metadata"]["name"]
        ),
    }


def claim_devices(pods: list[dict]) -> dict[str, list[tuple[str, str]]]:
    """A scenario's answer as claim -> [(pool, device)], to hold against the live results."""
    return {c: [(r["pool"], r["device"]) for r in p["claims"][c]] for p in pods for c in p["claims"]}
