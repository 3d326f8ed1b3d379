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
