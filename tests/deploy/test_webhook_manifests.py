"""The admission webhook as deployed: both configurations point at the web pods' TLS
container through its Service, fail open, ask only about pod creation, and trust a
certificate that covers the names the API server uses (the dev overlay's DEV-ONLY pair,
cert-manager's in its overlay, `manage.py webhookcert`'s elsewhere)."""

from __future__ import annotations

import base64
import datetime

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.x509.oid import NameOID
from django.urls import resolve

from kube.webhook.certs import service_hosts

from .manifests import (
    CUSTOM_KINDS,
    NAMESPACE,
    OVERLAYS,
    PRODUCTION_OVERLAYS,
    WEBHOOK_SECRET,
    command_of,
    find,
    lookup,
    render_overlay,
    resolved_env,
)

CONFIGURATIONS = {
    "MutatingWebhookConfiguration": ("mutate.hamiadmin.io", "/webhook/mutate"),
    "ValidatingWebhookConfiguration": ("validate.hamiadmin.io", "/webhook/validate"),
}


@pytest.fixture(params=OVERLAYS)
def overlay(request):
    return request.param


@pytest.fixture
def objects(overlay):
    return render_overlay(overlay)


def webhook_container(objects) -> dict:
    spec = find(objects, "Deployment", "hamiadmin-web")["spec"]["template"]["spec"]
    [container] = [c for c in spec["containers"] if c["name"] == "webhook"]
    return container


def the_webhook(objects, kind: str) -> dict:
    [hook] = find(objects, kind, "hamiadmin")["webhooks"]
    return hook


@pytest.mark.parametrize("kind", sorted(CONFIGURATIONS))
def test_each_configuration_asks_about_pod_creation_only_and_fails_open(objects, kind):
    hook = the_webhook(objects, kind)
    name, path = CONFIGURATIONS[kind]
    assert hook["name"] == name
    assert hook["failurePolicy"] == "Ignore"  # a webhook away never blocks a pod
    assert hook["sideEffects"] == "None"
    assert hook["admissionReviewVersions"] == ["v1"]
    assert hook["timeoutSeconds"] <= 10
    assert hook["rules"] == [
        {
            "operations": ["CREATE"],
            "apiGroups": [""],
            "apiVersions": ["v1"],
            "resources": ["pods"],
            "scope": "Namespaced",
        }
    ]
    service = hook["clientConfig"]["service"]
    assert (service["name"], service["namespace"], service["port"], service["path"]) == (
        "hamiadmin-webhook",
        NAMESPACE,
        443,
        path,
    )
    # The path is one the webhook's URLconf serves.
    assert resolve(path, urlconf="kube.webhook.urls").url_name == path.strip("/").replace("/", "-")
    excluded = {
        e["key"]: e["values"]
        for e in hook["namespaceSelector"]["matchExpressions"]
        if e["operator"] == "NotIn"
    }
    assert excluded == {
        "hamiadmin.io/webhook": ["ignore"],
        "hami.io/webhook": ["ignore"],  # HAMi's namespace opt-out, honoured as HAMi's chart does
        "kubernetes.io/metadata.name": ["kube-system", NAMESPACE],
    }


def test_the_service_reaches_the_web_pods_tls_container_serving_only_the_webhook(objects):
    service = find(objects, "Service", "hamiadmin-webhook")
    [port] = service["spec"]["ports"]
    assert port["port"] == 443
    web = find(objects, "Deployment", "hamiadmin-web")
    labels = web["spec"]["template"]["metadata"]["labels"]
    assert all(labels.get(k) == v for k, v in service["spec"]["selector"].items())
    container = webhook_container(objects)
    [named] = [p for p in container["ports"] if p["name"] == port["targetPort"]]
    argv = command_of(container)
    assert argv[0] == "gunicorn" and argv[argv.index("--bind") + 1] == f"0.0.0.0:{named['containerPort']}"
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in web["spec"]["template"]["spec"]["volumes"]}
    secret_name = volumes["webhook-tls"]["secret"]["secretName"]
    assert secret_name.startswith(WEBHOOK_SECRET)
    assert argv[argv.index("--certfile") + 1] == f"{mounts['webhook-tls']}/tls.crt"
    assert argv[argv.index("--keyfile") + 1] == f"{mounts['webhook-tls']}/tls.key"
    env = resolved_env(container, objects)
    assert env["HAMIADMIN_URLCONF"] == "kube.webhook.urls"
    # Django answers 400 to a Host it does not know: every name the API server may use.
    assert set(service_hosts()) <= set(env["ALLOWED_HOSTS"].split(","))
    for probe in ("livenessProbe", "readinessProbe"):
        get = container[probe]["httpGet"]
        assert get["scheme"] == "HTTPS" and get["port"] == port["targetPort"] and get["path"] == "/healthz"
        host = {h["name"]: h["value"] for h in get["httpHeaders"]}["Host"]
        assert host in env["ALLOWED_HOSTS"].split(",")


def _certificate(pem: bytes) -> x509.Certificate:
    return x509.load_pem_x509_certificate(pem)


def test_the_dev_overlay_trusts_its_dev_only_certificate_and_serves_it():
    objects = render_overlay("dev")
    secret = lookup(
        objects,
        "Secret",
        find(objects, "Deployment", "hamiadmin-web")["spec"]["template"]["spec"]["volumes"][-1]["secret"][
            "secretName"
        ],
    )
    assert secret["type"] == "kubernetes.io/tls"
    cert_pem = base64.b64decode(secret["data"]["tls.crt"])
    key_pem = base64.b64decode(secret["data"]["tls.key"])
    certificate = _certificate(cert_pem)
    [organization] = certificate.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)
    assert "DEV-ONLY" in organization.value  # committed on purpose: it says so
    names = certificate.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert set(service_hosts()) <= set(names.get_values_for_type(x509.DNSName))
    key = serialization.load_pem_private_key(key_pem, password=None)
    assert key.public_key().public_numbers() == certificate.public_key().public_numbers()
    assert certificate.not_valid_after_utc > datetime.datetime.now(datetime.UTC) + datetime.timedelta(
        days=365
    )
    for kind in CONFIGURATIONS:
        assert base64.b64decode(the_webhook(objects, kind)["clientConfig"]["caBundle"]) == cert_pem


@pytest.mark.parametrize("overlay", [o for o in PRODUCTION_OVERLAYS if o != "cert-manager"])
def test_production_leaves_the_ca_bundle_to_webhookcert(overlay):
    objects = render_overlay(overlay)
    for kind in CONFIGURATIONS:
        assert "caBundle" not in the_webhook(objects, kind)["clientConfig"]
        assert "cert-manager.io/inject-ca-from" not in find(objects, kind, "hamiadmin")["metadata"].get(
            "annotations", {}
        )


def test_the_cert_manager_overlay_issues_the_secret_and_injects_the_ca():
    objects = render_overlay("cert-manager")
    production = render_overlay("production")
    [certificate] = [o for o in objects if o["kind"] == "Certificate"]
    [issuer] = [o for o in objects if o["kind"] == "Issuer"]
    assert {(o["apiVersion"], o["kind"]) for o in (certificate, issuer)} <= CUSTOM_KINDS
    spec = certificate["spec"]
    assert spec["secretName"] == WEBHOOK_SECRET
    assert set(service_hosts()) <= set(spec["dnsNames"])
    assert spec["issuerRef"] == {"name": issuer["metadata"]["name"], "kind": "Issuer"}
    assert "selfSigned" in issuer["spec"]
    assert certificate["metadata"]["namespace"] == issuer["metadata"]["namespace"] == NAMESPACE
    for kind in CONFIGURATIONS:
        annotations = find(objects, kind, "hamiadmin")["metadata"]["annotations"]
        assert (
            annotations["cert-manager.io/inject-ca-from"] == f"{NAMESPACE}/{certificate['metadata']['name']}"
        )
    # Otherwise production as it is.
    added = {(o["kind"], o["metadata"]["name"]) for o in objects} - {
        (o["kind"], o["metadata"]["name"]) for o in production
    }
    assert added == {("Issuer", "hamiadmin-selfsigned"), ("Certificate", "hamiadmin-webhook")}
    assert find(objects, "Deployment", "hamiadmin-web") == find(production, "Deployment", "hamiadmin-web")
