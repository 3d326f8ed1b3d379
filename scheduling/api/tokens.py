"""Issuing API tokens: people get a role, agents get bound to one node. Used by the commands.

Keys are DRF authtoken keys (40 hex characters when generated). A key given from outside
(a Kubernetes Secret) must be 32-40 characters of letters, digits, ``-`` or ``_`` so it
fits the token table and survives an ``Authorization`` header unquoted.
"""

from __future__ import annotations

import re

from django.contrib.auth import get_user_model
from django.db import transaction
from rest_framework.authtoken.models import Token

from scheduling.roles import AGENT, AGENT_PREFIX, ROLES, role_group

KEY_PATTERN = re.compile(r"[A-Za-z0-9_-]{32,40}")
# Kubernetes node names are DNS-1123 subdomains; the user name `agent:<node>` must fit 150 chars.
NODE_NAME_PATTERN = re.compile(r"[a-z0-9]([-a-z0-9.]*[a-z0-9])?")
NODE_NAME_MAX = 150 - len(AGENT_PREFIX)


class TokenRefused(ValueError):
    """The command's input cannot make a token; the message says which part and why."""


def check_node_name(node: str) -> str:
    if len(node) > NODE_NAME_MAX or not NODE_NAME_PATTERN.fullmatch(node):
        raise TokenRefused(
            f"node name {node!r} is not a Kubernetes node name "
            f"(lower-case letters, digits, '-' and '.', at most {NODE_NAME_MAX} characters)"
        )
    return node


def check_key(key: str) -> str:
    if not KEY_PATTERN.fullmatch(key):
        raise TokenRefused("--key must be 32 to 40 characters of letters, digits, '-' or '_'")
    return key


def _token_for(user, key: str | None, rotate: bool) -> str:
    """The user's key: kept as it is, replaced by `key`, or regenerated with `rotate`."""
    current = Token.objects.filter(user=user).first()
    if key is not None:
        if Token.objects.filter(key=key).exclude(user=user).exists():
            raise TokenRefused("--key is already the key of another user")
        if current is not None and current.key == key:
            return key
    elif current is not None and not rotate:
        return current.key
    if current is not None:
        current.delete()
    return Token.objects.create(user=user, key=key or Token.generate_key()).key


@transaction.atomic
def issue_role_token(username: str, role: str, rotate: bool = False) -> str:
    """Create the user if needed, give it exactly `role` among the roles, and return its key."""
    if role not in ROLES:
        raise TokenRefused(f"role must be one of {', '.join(ROLES)}, got {role!r}")
    username = username.strip()
    if not username or len(username) > 150:
        raise TokenRefused("USERNAME must be 1 to 150 characters")
    if username.startswith(AGENT_PREFIX):
        raise TokenRefused(
            f"user names starting with {AGENT_PREFIX!r} are reserved for agents (use agenttoken)"
        )
    user, created = get_user_model().objects.get_or_create(username=username)
    if created:
        user.set_unusable_password()
        user.save(update_fields=["password"])
    if user.groups.filter(name=AGENT).exists():
        raise TokenRefused(f"user {username!r} is an agent")
    user.groups.remove(*user.groups.filter(name__in=ROLES))
    user.groups.add(role_group(role))
    return _token_for(user, None, rotate)


@transaction.atomic
def issue_agent_token(node: str, key: str | None = None, rotate: bool = False) -> str:
    """The key of the agent bound to `node` (user ``agent:<node>``, group ``agent``, no role)."""
    check_node_name(node)
    if key is not None:
        check_key(key)
    user, created = get_user_model().objects.get_or_create(username=f"{AGENT_PREFIX}{node}")
    if created:
        user.set_unusable_password()
        user.save(update_fields=["password"])
    user.groups.remove(*user.groups.filter(name__in=ROLES))
    user.groups.add(role_group(AGENT))
    if user.is_superuser or user.is_staff:
        user.is_superuser = user.is_staff = False
        user.save(update_fields=["is_superuser", "is_staff"])
    return _token_for(user, key, rotate)
