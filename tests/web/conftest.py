"""Dashboard fixtures: real data made the way production makes it (services + a real cycle).

The cluster comes in through `services.report_inventory` (what agents call), pods through
`services.submit_pod` (what the API calls), placements through `pipeline.run_cycle`.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from django.conf import settings

from scheduling import services
from scheduling.management.commands.demo import DemoInventory
from scheduling.pipeline import run_cycle
from scheduling.roles import VIEWER, role_group

WALKTHROUGH = Path(settings.BASE_DIR) / "static" / "scheduling" / "examples" / "chain-mutex-binpack-t4.json"
PASSWORD = "a-long-test-passphrase-42"


@pytest.fixture(autouse=True)
def local_triggers(settings):
    """No Celery tasks from these tests: a cycle runs when the test runs one."""
    settings.REDIS_URL = ""


def limits(gpu=None, mem=None, cores=None) -> dict:
    values = {"nvidia.com/gpu": gpu, "nvidia.com/gpumem": mem, "nvidia.com/gpucores": cores}
    return {"limits": {key: value for key, value in values.items() if value is not None}}


def submit(name: str, gpu=1, mem=None, cores=None, annotations=None, namespace="default"):
    return services.submit_pod(
        namespace, name, annotations or {}, [{"name": "main", "resources": limits(gpu, mem, cores)}]
    )


def cycle(trigger: str = "test"):
    return run_cycle(trigger)


def report_walkthrough() -> None:
    """SPEC 6's walk-through: t4-node with four T4 cards; GPU-0 gets two 1000 MiB tenants and
    GPU-1 one (pinned by UUID and placed by a real cycle), GPU-2 and GPU-3 stay empty; then the
    `latency-tier` pod (mutex,binpack, one 1000 MiB vGPU) is submitted and scheduled."""
    raw = json.loads(WALKTHROUGH.read_text(encoding="utf-8"))
    node = raw["nodes"][0]
    devices = [{key: value for key, value in card.items() if key != "used"} for card in node["devices"]]
    services.report_inventory(node["name"], devices=devices)
    for i, uuid in enumerate(("GPU-0", "GPU-0", "GPU-1")):
        submit(f"tenant-{i}", mem=1000, annotations={"nvidia.com/use-gpuuuid": uuid})
    cycle("tenants")
    pod = raw["pods"][0]
    services.submit_pod(pod["namespace"], pod["name"], pod["annotations"], pod["containers"])
    cycle("walk-through")


def report_demo_cluster() -> list[dict]:
    """The demo nodes of `make run` (deploy/demo/*.yaml), reported as their agents would."""
    inventory = DemoInventory()
    inventory.report()
    return inventory.nodes


def t4_mutex_waits() -> None:
    """Four T4 tenants (one per card under the default spread chain), then a T4 pod with
    `mutex,binpack` that must wait: every T4 card already has a tenant."""
    for i in range(4):
        submit(f"t4-tenant-{i}", mem=2000, cores=10, annotations={"nvidia.com/use-gputype": "T4"})
    cycle("tenants")
    submit(
        "mutex-waits",
        mem=1000,
        annotations={"nvidia.com/use-gputype": "T4", "hami.io/gpu-scheduler-policy": "mutex,binpack"},
    )
    cycle("mutex")


@pytest.fixture
def viewer_user(django_user_model):
    user = django_user_model.objects.create_user("olga", password=PASSWORD)
    user.groups.add(role_group(VIEWER))
    return user


@pytest.fixture
def viewer_client(client, viewer_user):
    client.force_login(viewer_user)
    return client
