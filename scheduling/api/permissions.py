"""DRF permission classes over `scheduling.roles`: reads and writes by role; reports by agents only.

A refusal names what was needed and what the caller holds, so a 403 tells the operator which
group to ask for instead of only that something was refused.
"""

from __future__ import annotations

from rest_framework.permissions import SAFE_METHODS, BasePermission

from scheduling.roles import AGENT, OPERATOR, VIEWER, agent_node, has_role, role_of

#: The one endpoint an agent token may call.
REPORT_PATH = "/api/v1/agents/report/"


def refusal(needed: str, user) -> str:
    """Why a caller without the role `needed` is refused: the role needed and the one held."""
    role = role_of(user)
    if role == AGENT:
        return (
            f"this needs the {needed} role; an agent token may only report its own node (POST {REPORT_PATH})"
        )
    if role is None:
        return f"this needs the {needed} role; your account has no role (an admin can add you to the {needed} group)"
    return f"this needs the {needed} role; your role is {role}"


class RoleRequired(BasePermission):
    """Reads need the view's `read_role`, writes its `write_role` (defaults: viewer, operator).

    Agents are refused whatever the method: they may only report. DRF makes one instance per
    request, so the refusal's `message` is set for this caller.
    """

    message = "Your role does not allow this."

    def has_permission(self, request, view) -> bool:
        needed = (
            getattr(view, "read_role", VIEWER)
            if request.method in SAFE_METHODS
            else getattr(view, "write_role", OPERATOR)
        )
        if has_role(request.user, needed):
            return True
        self.message = refusal(needed, request.user)
        return False


class ReportsOwnNode(BasePermission):
    """Only an agent token, and (checked by the view on the body) only for its own node."""

    message = "Only an agent token may report inventory."

    def has_permission(self, request, view) -> bool:
        if agent_node(request.user) is not None:
            return True
        role = role_of(request.user)
        if role is not None:
            self.message = f"only an agent token may report inventory; this token has the {role} role"
        return False
