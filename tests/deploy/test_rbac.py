"""The Roles the manifests grant are exactly the calls the code makes, per identity and overlay.

The chain is checked end to end: tests/kube/test_rbac.py runs each identity's code against
the stand-in API server and compares the requests it sent with kube/api.py's rules;
here every overlay is rendered with `kubectl kustomize` and the grants bound to each
ServiceAccount are compared with the same rules, scope included (the leader Lease only in
hamiadmin's namespace, the rest cluster-wide). A grant nothing calls fails, as does a call
nothing grants.
"""

import pytest

from kube.api import (
    EXTENDER_AGENT_RBAC_RULES,
    EXTENDER_WEB_RBAC_RULES,
    OWN_NAMESPACE_RESOURCES,
    RBAC_RULES,
)

from .manifests import (
    API_CALLERS,
    EXTENDER_WEB_SERVICE_ACCOUNT,
    KUBE_AGENT_SERVICE_ACCOUNT,
    NAMESPACE,
    OVERLAYS,
    RbacGrant,
    rbac_rules,
)

#: What each ServiceAccount runs, per overlay: the rules of that code path in api.py.
EXPECTED = {
    ("dev", KUBE_AGENT_SERVICE_ACCOUNT): RBAC_RULES,
    ("production", KUBE_AGENT_SERVICE_ACCOUNT): RBAC_RULES,
    ("cert-manager", KUBE_AGENT_SERVICE_ACCOUNT): RBAC_RULES,
    ("node-pools", KUBE_AGENT_SERVICE_ACCOUNT): RBAC_RULES,
    ("extender", KUBE_AGENT_SERVICE_ACCOUNT): EXTENDER_AGENT_RBAC_RULES,
    ("extender", EXTENDER_WEB_SERVICE_ACCOUNT): EXTENDER_WEB_RBAC_RULES,
}


def scoped(rules) -> set[RbacGrant]:
    """The rules as the manifests must grant them: the Lease in our namespace, the rest everywhere."""
    return {
        RbacGrant(
            group, resource, verb, NAMESPACE if (group, resource) in OWN_NAMESPACE_RESOURCES else "cluster"
        )
        for group, resource, verb in rules
    }


def test_every_api_caller_of_every_overlay_is_checked():
    callers = {(overlay, account) for overlay in OVERLAYS for account in API_CALLERS[overlay].values()}
    assert callers == set(EXPECTED)


@pytest.mark.parametrize(("overlay", "service_account"), sorted(EXPECTED))
def test_granted_equals_what_the_code_calls(overlay, service_account):
    granted = rbac_rules(overlay, service_account)
    wanted = scoped(EXPECTED[overlay, service_account])
    assert not granted - wanted, (
        f"{overlay}: {service_account} is granted what no call needs: {granted - wanted}"
    )
    assert not wanted - granted, (
        f"{overlay}: {service_account} lacks grants its calls need: {wanted - granted}"
    )


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_the_shared_service_account_has_no_grant(overlay):
    """Workers, beat and the NVML agent run as `hamiadmin`, which may do nothing."""
    assert rbac_rules(overlay, "hamiadmin") == set()


def test_the_extender_web_rules_are_a_part_of_the_watcher_rules():
    """The web's /extender/bind runs the watcher's Binder: it cannot need anything more."""
    assert set(EXTENDER_WEB_RBAC_RULES) <= set(RBAC_RULES)
    assert set(EXTENDER_AGENT_RBAC_RULES) <= set(RBAC_RULES)
