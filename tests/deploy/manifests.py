"""Render the Kustomize overlays and read facts back from the rendered objects.

The deploy tests use this module, and so can later checks that hold the code against the
manifests: `rbac_rules(overlay, service_account)` is the machine-readable list of what an
identity may do, read from the rendered ClusterRoles/Roles and their bindings
(tests/deploy/test_rbac.py compares it with kube/api.py).
"""

from __future__ import annotations

import functools
import os
import shlex
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
OVERLAYS = ("dev", "production", "extender", "cert-manager", "node-pools")
#: Overlays built on production: secrets out of band, images from a registry.
PRODUCTION_OVERLAYS = ("production", "extender", "cert-manager", "node-pools")
NAMESPACE = "hamiadmin"
KUBE_AGENT_SERVICE_ACCOUNT = "hamiadmin-kube"
EXTENDER_WEB_SERVICE_ACCOUNT = "hamiadmin-extender"
#: The workloads that call the Kubernetes API, per overlay, and the ServiceAccount each uses.
#: Every other pod runs without a token.
API_CALLERS = {
    "dev": {"hamiadmin-kube-agent": KUBE_AGENT_SERVICE_ACCOUNT},
    "production": {"hamiadmin-kube-agent": KUBE_AGENT_SERVICE_ACCOUNT},
    "extender": {
        "hamiadmin-kube-agent": KUBE_AGENT_SERVICE_ACCOUNT,
        "hamiadmin-web": EXTENDER_WEB_SERVICE_ACCOUNT,
    },
    "cert-manager": {"hamiadmin-kube-agent": KUBE_AGENT_SERVICE_ACCOUNT},
    "node-pools": {"hamiadmin-kube-agent": KUBE_AGENT_SERVICE_ACCOUNT},
}
CLUSTER_SCOPED_KINDS = {
    "Namespace",
    "ClusterRole",
    "ClusterRoleBinding",
    "RuntimeClass",
    "MutatingWebhookConfiguration",
    "ValidatingWebhookConfiguration",
}
#: Kinds of custom resources (no published schema): cert-manager's, in the cert-manager overlay.
CUSTOM_KINDS = {("cert-manager.io/v1", "Issuer"), ("cert-manager.io/v1", "Certificate")}
WEBHOOK_SECRET = "hamiadmin-webhook-tls"
POD_OWNER_KINDS = {"Deployment", "DaemonSet", "StatefulSet", "Job"}
# Secrets production expects to be created out of band (docs/deploy.md), with their keys.
OUT_OF_BAND_SECRETS = {
    "hamiadmin-secrets": ("SECRET_KEY", "DATABASE_URL", "REDIS_URL"),
    "hamiadmin-agent-tokens": (),  # one key per GPU node name
    # `manage.py webhookcert` (or cert-manager, in its overlay): the webhook's TLS pair.
    "hamiadmin-webhook-tls": ("tls.crt", "tls.key"),
}

# Debian 12: `apt-get install -y kubernetes-client` (kubectl 1.20, kustomize v2.0.3).
KUBECTL_INSTALL_HINT = "apt-get update && apt-get install -y kubernetes-client"


class RbacGrant(NamedTuple):
    """One verb on one resource; scope is "cluster" or the namespace of a Role."""

    api_group: str
    resource: str
    verb: str
    scope: str


def kubectl_path() -> str | None:
    """$KUBECTL if set (to test another kubectl), else kubectl on PATH."""
    return os.environ.get("KUBECTL") or shutil.which("kubectl")


def require_kubectl() -> str:
    """kubectl, or skip; under REQUIRE_SERVICES=1 (CI) a missing kubectl fails instead."""
    path = kubectl_path()
    if path:
        return path
    message = f"kubectl not found (install: {KUBECTL_INSTALL_HINT})"
    if os.environ.get("REQUIRE_SERVICES") == "1":
        pytest.fail(message + "; REQUIRE_SERVICES=1 forbids skipping")
    pytest.skip(message)


@functools.cache
def _render(kubectl: str, overlay: str) -> tuple[dict, ...]:
    result = subprocess.run(
        [kubectl, "kustomize", str(DEPLOY / "k8s" / "overlays" / overlay)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    if result.returncode != 0:
        raise AssertionError(f"kubectl kustomize {overlay} failed:\n{result.stderr}")
    return tuple(doc for doc in yaml.safe_load_all(result.stdout) if doc)


def render_overlay(overlay: str) -> tuple[dict, ...]:
    """The objects `kubectl kustomize deploy/k8s/overlays/<overlay>` prints."""
    return _render(require_kubectl(), overlay)


def find(objects, kind: str, name: str) -> dict:
    matches = [o for o in objects if o["kind"] == kind and o["metadata"]["name"] == name]
    assert len(matches) == 1, f"expected one {kind}/{name}, found {len(matches)}"
    return matches[0]


def lookup(objects, kind: str, name: str) -> dict | None:
    """The object of this kind and name (generated names already carry their hash), or None."""
    for o in objects:
        if o["kind"] == kind and o["metadata"]["name"] == name:
            return o
    return None


def pod_specs(objects) -> Iterator[tuple[dict, dict]]:
    """(owner object, pod spec) for every object that runs pods."""
    for o in objects:
        if o["kind"] in POD_OWNER_KINDS:
            yield o, o["spec"]["template"]["spec"]


def containers(pod_spec: dict) -> list[dict]:
    """Init and app containers alike: both need limits, images, security settings."""
    return list(pod_spec.get("initContainers", [])) + list(pod_spec["containers"])


def resolved_env(container: dict, objects) -> dict[str, str]:
    """The container's environment as the kubelet would build it: envFrom, then env.

    ConfigMap values are resolved from the rendered objects; Secret-backed and downward-API
    values appear as "<secret NAME>" / "<ref>" since their value is not in the manifests.
    """
    env: dict[str, str] = {}
    for source in container.get("envFrom", []):
        if "configMapRef" in source:
            config_map = lookup(objects, "ConfigMap", source["configMapRef"]["name"])
            assert config_map is not None, f"ConfigMap {source['configMapRef']['name']} is not rendered"
            env.update(config_map.get("data", {}))
        elif "secretRef" in source:
            secret_name = source["secretRef"]["name"]
            secret = lookup(objects, "Secret", secret_name)
            keys = secret["data"] if secret else OUT_OF_BAND_SECRETS[secret_name]
            env.update({key: f"<secret {secret_name}>" for key in keys})
    for item in container.get("env", []):
        env[item["name"]] = item["value"] if "value" in item else "<ref>"
    return env


def command_of(container: dict) -> list[str]:
    return list(container.get("command", [])) + list(container.get("args", []))


def invocations(argv: list[str]) -> list[list[str]]:
    """The programs a command line starts: itself, or each one inside `sh -c SCRIPT`.

    Inside a script an invocation starts at python/gunicorn/celery and ends at a
    redirection, a pipe, `&&`/`||` or `;`.
    """
    if len(argv) >= 3 and argv[0] in {"sh", "bash", "/bin/sh"} and argv[1] == "-c":
        tokens = shlex.split(argv[2].replace("\n", " ; "), posix=True)
    else:
        return [list(argv)]
    found, current = [], None
    for token in tokens:
        ends = token in {";", ">", "&&", "||", "|", "2>&1"} or token.endswith(";")
        if current is not None:
            if ends:
                found.append(current)
                current = None
            else:
                current.append(token)
        elif token in {"python", "gunicorn", "celery"}:
            current = [token]
    if current:
        found.append(current)
    return found


def is_django_container(container: dict) -> bool:
    """Runs Django settings: manage.py, gunicorn, celery or the Kubernetes integration."""
    joined = " ".join(command_of(container))
    return any(marker in joined for marker in ("manage.py", "gunicorn", "celery", "kube"))


def kube_agent_rbac_rules(overlay: str = "production") -> set[RbacGrant]:
    """Every (api group, resource, verb, scope) bound to the kube agent's ServiceAccount."""
    return rbac_rules(overlay, KUBE_AGENT_SERVICE_ACCOUNT)


def rbac_rules(overlay: str, service_account: str) -> set[RbacGrant]:
    """Every (api group, resource, verb, scope) bound to `service_account` in NAMESPACE."""
    objects = render_overlay(overlay)
    roles = {
        (o["kind"], o["metadata"].get("namespace"), o["metadata"]["name"]): o
        for o in objects
        if o["kind"] in {"ClusterRole", "Role"}
    }
    grants: set[RbacGrant] = set()
    for binding in objects:
        if binding["kind"] not in {"ClusterRoleBinding", "RoleBinding"}:
            continue
        bound = any(
            s["kind"] == "ServiceAccount" and s["name"] == service_account and s.get("namespace") == NAMESPACE
            for s in binding.get("subjects", [])
        )
        if not bound:
            continue
        ref = binding["roleRef"]
        binding_ns = binding["metadata"].get("namespace")
        role_ns = None if ref["kind"] == "ClusterRole" else binding_ns
        role = roles.get((ref["kind"], role_ns, ref["name"]))
        assert role is not None, f"{binding['kind']}/{binding['metadata']['name']} binds missing {ref}"
        scope = "cluster" if binding["kind"] == "ClusterRoleBinding" else binding_ns
        for rule in role.get("rules", []):
            for group in rule.get("apiGroups", []):
                for resource in rule.get("resources", []):
                    for verb in rule.get("verbs", []):
                        grants.add(RbacGrant(group, resource, verb, scope))
    return grants
