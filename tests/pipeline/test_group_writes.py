"""Writers of one pod group's phase and conditions take turns (`rowlocks`, step 6): a commit
placing members, a release of a member, a submission changing the group, an operator. Each
locks the group before it counts the members and writes, so none writes over a condition
another wrote meanwhile (before, each read the group unlocked and saved its whole list)."""

from __future__ import annotations

import pytest
from django.utils import timezone

from scheduling import services
from scheduling.engine.annotations import GroupRef
from scheduling.models import Pod, PodGroup
from scheduling.pipeline import run_cycle
from scheduling.pipeline.rowlocks import lock_pod_group
from tests.conftest import held_elsewhere

from .conftest import assert_consistent, card, limits

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def patient_commits(settings):
    """A commit waits for the group however long the other session holds it here (under a
    loaded machine its 0.6 s may stretch past the 2 s default bound)."""
    settings.HAMIADMIN = {**settings.HAMIADMIN, "COMMIT_LOCK_TIMEOUT_MS": 20000}


GROUP, MIN = "hami.io/group-name", "hami.io/group-min-member"


def member(name: str, min_member: int) -> Pod:
    annotations = {GROUP: "g", MIN: str(min_member)}
    return services.submit_pod(
        "default", name, annotations, [{"name": "main", "resources": limits(gpu=1, mem=1000)}]
    )


def reasons() -> list[str]:
    return [condition["reason"] for condition in PodGroup.objects.get(name="g").conditions]


def written_elsewhere(reason: str, hold: float = 0.6):
    """Another session adds a condition to group g, as an operator's rescale does, and holds
    the group's lock `hold` seconds before it commits: the block runs meanwhile."""

    def write() -> None:
        group = lock_pod_group(PodGroup.objects.filter(name="g")).get()
        condition = {"phase": group.phase, "reason": reason, "message": "", "at": timezone.now().isoformat()}
        group.conditions = [*group.conditions, condition]
        group.save(update_fields=["conditions", "updated_at"])

    return held_elsewhere(write, hold, "group g")


def test_a_commit_placing_a_member_keeps_a_condition_written_meanwhile(require_postgres):
    services.report_inventory("n1", {}, {}, [card("GPU-0", 0), card("GPU-1", 1)])
    member("m1", 1)
    run_cycle()
    assert PodGroup.objects.get(name="g").phase == PodGroup.RUNNING
    member("m2", 1)
    with written_elsewhere("Elsewhere"):
        run_cycle()  # places m2 and writes the group's phase line
    assert Pod.objects.get(name="m2").status == Pod.SCHEDULED
    assert PodGroup.objects.get(name="g").reason == "2/1 members placed"
    assert reasons()[-2:] == ["Elsewhere", "GangScheduled"]
    assert_consistent()


def test_a_release_of_a_member_keeps_a_condition_written_meanwhile(require_postgres):
    services.report_inventory("n1", {}, {}, [card("GPU-0", 0), card("GPU-1", 1)])
    member("m1", 2)
    member("m2", 2)
    run_cycle()
    assert PodGroup.objects.get(name="g").phase == PodGroup.RUNNING
    with written_elsewhere("Elsewhere"):
        services.release_pod(Pod.objects.get(name="m1"), Pod.SUCCEEDED)
    group = PodGroup.objects.get(name="g")
    assert group.phase == PodGroup.INQUEUE, "one of two members left"
    assert reasons()[-2:] == ["Elsewhere", "BelowMinMember"]
    assert_consistent()


def test_a_submission_resizing_its_owners_gang_keeps_a_condition_written_meanwhile(require_postgres):
    def owned(name: str, members: int) -> None:
        ref = GroupRef("g", "owner", members, owner_kind="Job", owner_name="batch")
        containers = [{"name": "main", "resources": limits(gpu=1, mem=1000)}]
        services.submit_pod("default", name, containers=containers, origin=Pod.KUBERNETES, group=ref)

    owned("m1", 2)
    with written_elsewhere("Elsewhere"):
        owned("m2", 3)  # the owner scaled: the submission resizes the gang and says so
    assert PodGroup.objects.get(name="g").min_member == 3
    assert reasons()[-2:] == ["Elsewhere", PodGroup.OWNER_SCALED]
