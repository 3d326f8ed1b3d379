"""DRF permission classes over `scheduling.roles`: reads and writes by role; reports by agents only."""

from __future__ import annotations

from rest_framework.permissions import SAFE_METHODS, BasePermission

from scheduling.roles import OPERATOR, VIEWER, agent_node, has_role


class RoleRequired(BasePermission):
    """Reads need the view's `read_role`, writes its `write_role` (defaults: viewer, operator).

    Agents are refused whatever the method: they may only report.
    """

    message = "Your role does not allow this."

    def has_permission(self, request, view) -> bool:
        needed = (
            getattr(view, "read_role", VIEWER)
            if request.method in SAFE_METHODS
            else getattr(view, "write_role", OPERATOR)
        )
        return has_role(request.user, needed)


class ReportsOwnNode(BasePermission):
    """Only an agent token, and (checked by the view on the body) only for its own node."""

    message = "Only an agent token may report inventory."

    def has_permission(self, request, view) -> bool:
        return agent_node(request.user) is not None
