"""Roles: who may do what, for the API and the pages alike. Roles are Django groups; agents are bound to one node.

Roles rank viewer < operator < admin; a superuser counts as admin. A user with no role
group is signed in but may do nothing (secure by default). An agent is the user
``agent:<node>`` in group ``agent``: every API permission refuses it except
`scheduling.api.permissions.ReportsOwnNode`, which admits it only for its own node.
"""

from __future__ import annotations

from django.contrib.auth.models import Group

VIEWER, OPERATOR, ADMIN = "viewer", "operator", "admin"
ROLES = (VIEWER, OPERATOR, ADMIN)
RANK = {VIEWER: 1, OPERATOR: 2, ADMIN: 3}
AGENT = "agent"
AGENT_PREFIX = "agent:"


def role_group(name: str) -> Group:
    """The group of a role (or of agents), created on first use."""
    group, _ = Group.objects.get_or_create(name=name)
    return group


def role_of(user) -> str | None:
    """The user's strongest role, ``agent`` for an agent, or None. Cached on the user object."""
    if not getattr(user, "is_authenticated", False) or not user.is_active:
        return None
    if hasattr(user, "_hami_role"):
        return user._hami_role
    names = set(user.groups.values_list("name", flat=True))
    role: str | None
    if AGENT in names:
        role = AGENT
    elif user.is_superuser:
        role = ADMIN
    else:
        held = [name for name in ROLES if name in names]
        role = max(held, key=RANK.__getitem__) if held else None
    user._hami_role = role
    return role


def has_role(user, needed: str) -> bool:
    role = role_of(user)
    return role in RANK and RANK[role] >= RANK[needed]


#: Kubernetes' highest user-definable priority (`HighestUserDefinablePriority`): PriorityClass
#: values above it are the system's (`system-cluster-critical` is 2,000,000,000).
HIGHEST_USER_PRIORITY = 1_000_000_000
#: Who may give a pod or a job a priority in the system range through the REST API.
SYSTEM_PRIORITY_ROLE = ADMIN


def priority_refusal(user, priority) -> str | None:
    """Why `user` may not set `priority` through the API (the system range needs an admin: such
    a pod evicts everyone's and is itself never evicted), else None. Kubernetes pods keep their
    PriorityClass value: the kube agent does not go through the API."""
    if (
        not isinstance(priority, int)
        or priority <= HIGHEST_USER_PRIORITY
        or has_role(user, SYSTEM_PRIORITY_ROLE)
    ):
        return None
    return (
        f"at most {HIGHEST_USER_PRIORITY:,} (Kubernetes' highest user-definable priority); "
        f"the system range above it needs the {SYSTEM_PRIORITY_ROLE} role"
    )


def agent_node(user) -> str | None:
    """The node an agent user is bound to (the part after ``agent:``), or None for anyone else."""
    if role_of(user) != AGENT or not user.username.startswith(AGENT_PREFIX):
        return None
    return user.username[len(AGENT_PREFIX) :] or None
