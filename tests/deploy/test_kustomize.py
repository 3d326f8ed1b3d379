"""The Kustomize overlays render, match the Kubernetes schemas and say what docs/deploy.md says.

Rendering uses the real `kubectl kustomize` (no cluster needed); there is no API server
here, so objects are checked against the published OpenAPI schemas (kubernetes-validate),
then for the facts the schemas cannot know.
"""

import base64
from urllib.parse import urlsplit

import kubernetes_validate
import pytest

from .manifests import (
    API_CALLERS,
    CLUSTER_SCOPED_KINDS,
    CUSTOM_KINDS,
    EXTENDER_WEB_SERVICE_ACCOUNT,
    NAMESPACE,
    OUT_OF_BAND_SECRETS,
    OVERLAYS,
    PRODUCTION_OVERLAYS,
    command_of,
    containers,
    find,
    invocations,
    is_django_container,
    lookup,
    pod_specs,
    render_overlay,
    resolved_env,
)

# The oldest Kubernetes the manifests promise to fit, and the newest schemas shipped.
SCHEMA_VERSIONS = ("1.30", kubernetes_validate.latest_version())
APP_WORKLOADS = {
    ("Deployment", "hamiadmin-web"),
    ("Deployment", "hamiadmin-worker"),
    ("Deployment", "hamiadmin-simulator"),
    ("Deployment", "hamiadmin-beat"),
    ("Deployment", "hamiadmin-kube-agent"),
    ("DaemonSet", "hamiadmin-nvml-agent"),
    ("Job", "hamiadmin-migrate"),
}
SECRET_SETTINGS = {"SECRET_KEY", "DATABASE_URL", "REDIS_URL", "POSTGRES_PASSWORD"}
FALSE_VALUES = {"0", "false", "no", "off"}


@pytest.fixture(params=OVERLAYS)
def overlay(request):
    return request.param


@pytest.fixture
def objects(overlay):
    return render_overlay(overlay)


def pod_labels(owner):
    return owner["spec"]["template"]["metadata"].get("labels", {})


def selects(selector: dict, labels: dict) -> bool:
    return all(labels.get(key) == value for key, value in selector.items())


def named_port(container, port):
    """A probe or Service port (number or name) as the container's port number."""
    if isinstance(port, int):
        return port
    matches = [p["containerPort"] for p in container.get("ports", []) if p.get("name") == port]
    assert matches, f"container {container['name']} has no port named {port!r}"
    return matches[0]


def test_every_object_matches_the_kubernetes_schemas(objects, overlay):
    errors = []
    for obj in objects:
        if (obj["apiVersion"], obj["kind"]) in CUSTOM_KINDS:
            continue  # no published schema: checked field by field in test_webhook_manifests.py
        for version in SCHEMA_VERSIONS:
            try:
                kubernetes_validate.validate(obj, version, strict=True)
            except kubernetes_validate.ValidationError as error:
                errors.append(f"{obj['kind']}/{obj['metadata']['name']} @ {version}: {error.message}")
    assert not errors, f"{overlay}:\n" + "\n".join(errors)


def test_namespaced_objects_live_in_the_hamiadmin_namespace(objects):
    find(objects, "Namespace", NAMESPACE)
    for obj in objects:
        namespace = obj["metadata"].get("namespace")
        where = f"{obj['kind']}/{obj['metadata']['name']}"
        if obj["kind"] in CLUSTER_SCOPED_KINDS:
            assert namespace is None, f"cluster-scoped {where} has a namespace"
        else:
            assert namespace == NAMESPACE, f"{where} is in namespace {namespace!r}"


def test_every_container_has_cpu_and_memory_requests_and_limits(objects):
    for owner, spec in pod_specs(objects):
        for container in containers(spec):
            resources = container.get("resources", {})
            for bound in ("requests", "limits"):
                assert {"cpu", "memory"} <= set(resources.get(bound, {})), (
                    f"{owner['metadata']['name']}/{container['name']} lacks {bound}"
                )


def test_the_same_workloads_run_in_every_overlay(objects):
    present = {(o["kind"], o["metadata"]["name"]) for o in objects}
    assert APP_WORKLOADS <= present, f"missing: {APP_WORKLOADS - present}"


def test_web_probes_liveness_healthz_readiness_readyz_on_port_8000_with_an_allowed_host(objects):
    web = find(objects, "Deployment", "hamiadmin-web")
    container = next(c for c in web["spec"]["template"]["spec"]["containers"] if c["name"] == "web")
    allowed_hosts = resolved_env(container, objects)["ALLOWED_HOSTS"].split(",")
    for probe_name, path in (("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")):
        probe = container[probe_name]["httpGet"]
        assert probe["path"] == path
        assert named_port(container, probe["port"]) == 8000
        # Django answers 400 to a Host outside ALLOWED_HOSTS; the kubelet's default is the pod IP.
        host = {h["name"]: h["value"] for h in probe.get("httpHeaders", [])}.get("Host")
        assert host in allowed_hosts, f"{probe_name} Host {host!r} not in ALLOWED_HOSTS {allowed_hosts}"
    assert "gunicorn" in command_of(container)[0]


def test_web_service_sends_port_8000_to_web_pods_only(objects):
    web = find(objects, "Deployment", "hamiadmin-web")
    container = web["spec"]["template"]["spec"]["containers"][0]
    service = find(objects, "Service", "hamiadmin-web")
    [port] = service["spec"]["ports"]
    assert port["port"] == 8000
    assert named_port(container, port["targetPort"]) == 8000
    chosen = [
        o["metadata"]["name"]
        for o, _ in pod_specs(objects)
        if selects(service["spec"]["selector"], pod_labels(o))
    ]
    assert chosen == ["hamiadmin-web"]


def test_each_workload_selector_picks_its_own_pods_and_no_others(objects):
    owners = [o for o, _ in pod_specs(objects) if o["kind"] != "Job"]
    selectors = [(o["kind"], o["metadata"]["name"], o["spec"]["selector"]["matchLabels"]) for o in owners]
    selectors += [
        (o["kind"], o["metadata"]["name"], o["spec"]["selector"]["matchLabels"])
        for o in objects
        if o["kind"] == "PodDisruptionBudget"
    ]
    for kind, name, selector in selectors:
        chosen = [o["metadata"]["name"] for o in owners if selects(selector, pod_labels(o))]
        assert chosen == [name], f"{kind}/{name} selects {chosen}"


def test_beat_is_a_single_replica_replaced_by_recreate(objects):
    beat = find(objects, "Deployment", "hamiadmin-beat")
    assert beat["spec"]["replicas"] == 1
    assert beat["spec"]["strategy"]["type"] == "Recreate"


def test_overlays_set_their_own_worker_and_kube_agent_replicas():
    dev, production = (
        {
            name: find(render_overlay(o), "Deployment", name)["spec"]["replicas"]
            for name in ("hamiadmin-worker", "hamiadmin-kube-agent")
        }
        for o in ("dev", "production")
    )
    assert dev["hamiadmin-worker"] == 1
    assert production["hamiadmin-worker"] >= 2
    # Leader election makes a second kube agent a hot standby, not a second binder.
    assert production["hamiadmin-kube-agent"] == 2


def test_nvml_agent_daemonset_runs_on_gpu_nodes_with_nvml_access_and_its_node_token(objects, overlay):
    agent = find(objects, "DaemonSet", "hamiadmin-nvml-agent")
    spec = agent["spec"]["template"]["spec"]
    assert spec["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
    assert any(t.get("key") == "nvidia.com/gpu" for t in spec.get("tolerations", []))
    [container] = spec["containers"]
    env = {e["name"]: e for e in container["env"]}
    assert env["NVIDIA_VISIBLE_DEVICES"]["value"] == "all"
    assert "utility" in env["NVIDIA_DRIVER_CAPABILITIES"]["value"].split(",")
    assert env["NODE_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"

    volumes = {v["name"]: v for v in spec["volumes"]}
    mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
    assert volumes[mounts["/sys"]["name"]]["hostPath"]["path"] == "/sys"
    assert mounts["/sys"]["readOnly"] is True

    argv = command_of(container)
    token_file = argv[argv.index("--token-file") + 1]
    token_dir, _, leaf = token_file.rpartition("/")
    assert leaf == "$(NODE_NAME)"
    token_volume = volumes[mounts[token_dir]["name"]]
    secret_name = token_volume["secret"]["secretName"]
    assert secret_name.startswith("hamiadmin-agent-tokens")
    assert "items" not in token_volume["secret"], "every node's key must be projected"
    if overlay in PRODUCTION_OVERLAYS:
        assert spec["runtimeClassName"] == "nvidia"
        assert secret_name == "hamiadmin-agent-tokens"


def test_nvml_agent_is_root_only_without_privileges_and_everything_else_is_non_root(objects):
    for owner, spec in pod_specs(objects):
        for container in containers(spec):
            security = container.get("securityContext", {})
            where = f"{owner['metadata']['name']}/{container['name']}"
            assert security.get("privileged") is not True, where
            assert security.get("allowPrivilegeEscalation") is False, where
            assert security.get("capabilities", {}).get("drop") == ["ALL"], where
            non_root = security.get("runAsNonRoot", spec.get("securityContext", {}).get("runAsNonRoot"))
            if owner["metadata"]["name"] == "hamiadmin-nvml-agent":
                assert non_root is False and security["runAsUser"] == 0, where
            else:
                assert non_root is True, where


# The grants themselves are compared with the code in test_rbac.py.


def test_only_the_kubernetes_api_callers_carry_a_token(objects, overlay):
    """The kube agent everywhere, and the web pods in extender mode (/extender/bind)."""
    callers = API_CALLERS[overlay]
    for service_account in callers.values():
        account = find(objects, "ServiceAccount", service_account)
        assert account.get("automountServiceAccountToken", True) is True, service_account
    for owner, spec in pod_specs(objects):
        name = owner["metadata"]["name"]
        if name in callers:
            assert spec["serviceAccountName"] == callers[name], name
            assert spec.get("automountServiceAccountToken", True) is True, name
        else:
            assert spec.get("serviceAccountName") not in set(callers.values()), name
            assert spec.get("automountServiceAccountToken") is False, name


def test_the_extender_overlay_is_production_with_the_agent_in_extender_mode():
    production, extender = render_overlay("production"), render_overlay("extender")
    agent = find(extender, "Deployment", "hamiadmin-kube-agent")["spec"]["template"]["spec"]
    [container] = agent["containers"]
    assert command_of(container) == ["python", "-m", "kube", "--extender"]
    for base in (production, render_overlay("dev")):
        [watcher] = find(base, "Deployment", "hamiadmin-kube-agent")["spec"]["template"]["spec"]["containers"]
        assert "--extender" not in command_of(watcher)
    web = find(extender, "Deployment", "hamiadmin-web")["spec"]["template"]["spec"]
    assert web["serviceAccountName"] == EXTENDER_WEB_SERVICE_ACCOUNT
    # Apart from the identities, the same objects as production: same replicas, images, config.
    same = {(o["kind"], o["metadata"]["name"]) for o in production}
    added = {(o["kind"], o["metadata"]["name"]) for o in extender} - same
    assert added == {
        ("ServiceAccount", EXTENDER_WEB_SERVICE_ACCOUNT),
        ("ClusterRole", "hamiadmin-extender"),
        ("ClusterRoleBinding", "hamiadmin-extender"),
    }
    for kind, name in same - {
        ("Deployment", "hamiadmin-web"),
        ("Deployment", "hamiadmin-kube-agent"),
        ("ClusterRole", "hamiadmin-kube"),
    }:
        assert find(extender, kind, name) == find(production, kind, name), f"{kind}/{name}"


def test_scheduler_defaults_reach_every_django_process_from_the_configmap(objects):
    seen = 0
    for owner, spec in pod_specs(objects):
        for container in containers(spec):
            if not is_django_container(container):
                continue
            refs = [s["configMapRef"]["name"] for s in container.get("envFrom", []) if "configMapRef" in s]
            assert any(r.startswith("hamiadmin-config") for r in refs), owner["metadata"]["name"]
            env = resolved_env(container, objects)
            assert env["HAMI_NODE_SCHEDULER_POLICY"] == "binpack"
            assert env["HAMI_GPU_SCHEDULER_POLICY"] == "spread"
            assert env["HAMI_SCHEDULER_NAME"] == "hami-scheduler"
            assert env["DATABASE_URL"].startswith("<secret"), "DATABASE_URL must come from a Secret"
            seen += 1
    assert seen >= 6


def test_migrations_run_in_a_job_and_app_pods_wait_for_them(objects):
    job = find(objects, "Job", "hamiadmin-migrate")
    [migrate] = job["spec"]["template"]["spec"]["containers"]
    assert ["python", "manage.py", "migrate"] == command_of(migrate)[:3]
    for name in (
        "hamiadmin-web",
        "hamiadmin-worker",
        "hamiadmin-simulator",
        "hamiadmin-beat",
        "hamiadmin-kube-agent",
    ):
        spec = find(objects, "Deployment", name)["spec"]["template"]["spec"]
        waits = [
            argv
            for c in spec.get("initContainers", [])
            for argv in invocations(command_of(c))
            if argv[:3] == ["python", "manage.py", "migrate"] and "--check" in argv
        ]
        assert waits, f"{name} does not wait for `migrate --check`"


def test_every_hamiadmin_process_runs_one_image(objects, overlay):
    images = {
        c["image"]
        for _, spec in pod_specs(objects)
        for c in containers(spec)
        if not c["image"].startswith(("postgres:", "redis:"))
    }
    assert len(images) == 1, images
    [image] = images
    name, _, tag = image.rpartition(":")
    assert name and tag, f"{image} has no tag"
    if overlay in PRODUCTION_OVERLAYS:
        assert "/" in name, "production pulls from a registry"


def test_every_reference_to_a_configmap_or_secret_resolves(objects, overlay):
    """Dev must be self-contained; production may name only the out-of-band Secrets."""
    for owner, spec in pod_specs(objects):
        where = owner["metadata"]["name"]
        secret_refs = [v["secret"]["secretName"] for v in spec.get("volumes", []) if "secret" in v]
        for container in containers(spec):
            for source in container.get("envFrom", []):
                if "configMapRef" in source:
                    assert lookup(objects, "ConfigMap", source["configMapRef"]["name"]), where
                if "secretRef" in source:
                    secret_refs.append(source["secretRef"]["name"])
            for item in container.get("env", []):
                key_ref = item.get("valueFrom", {}).get("secretKeyRef")
                if key_ref:
                    secret_refs.append(key_ref["name"])
                    if overlay == "dev":
                        assert key_ref["key"] in lookup(objects, "Secret", key_ref["name"])["data"], where
        for name in secret_refs:
            if overlay in PRODUCTION_OVERLAYS:
                assert name in OUT_OF_BAND_SECRETS, f"{where} uses unknown Secret {name}"
            else:
                assert lookup(objects, "Secret", name), f"{where}: Secret {name} is not rendered"


@pytest.mark.parametrize("overlay", PRODUCTION_OVERLAYS)
def test_production_renders_no_secret_and_inlines_no_credential(overlay):
    objects = render_overlay(overlay)
    assert [o["metadata"]["name"] for o in objects if o["kind"] == "Secret"] == []
    for config_map in (o for o in objects if o["kind"] == "ConfigMap"):
        assert not SECRET_SETTINGS & set(config_map.get("data", {})), config_map["metadata"]["name"]
    for owner, spec in pod_specs(objects):
        for container in containers(spec):
            for item in container.get("env", []):
                assert not (item["name"] in SECRET_SETTINGS and "value" in item), (
                    f"{owner['metadata']['name']}/{container['name']} inlines {item['name']}"
                )


@pytest.mark.parametrize("overlay", PRODUCTION_OVERLAYS)
def test_production_runs_every_django_process_with_debug_off(overlay):
    objects = render_overlay(overlay)
    checked = 0
    for owner, spec in pod_specs(objects):
        for container in containers(spec):
            if is_django_container(container):
                env = resolved_env(container, objects)
                where = f"{owner['metadata']['name']}/{container['name']}"
                assert env.get("HAMIADMIN_ENV") == "production", where
                assert env.get("DEBUG", "false").lower() in FALSE_VALUES, where
                assert "example" not in env.get("SECRET_KEY", ""), where
                checked += 1
    assert checked >= 6


def test_dev_secrets_are_visibly_dev_only_placeholders():
    secrets = [o for o in render_overlay("dev") if o["kind"] == "Secret"]
    by_base_name = {s["metadata"]["name"].rsplit("-", 1)[0]: s for s in secrets}
    # Dev stands in for what production creates out of band, key for key.
    for name, keys in OUT_OF_BAND_SECRETS.items():
        assert set(keys) <= set(by_base_name[name]["data"]), name
    for secret in secrets:
        if secret.get("type") == "kubernetes.io/tls":
            continue  # a certificate says DEV-ONLY in its subject: test_webhook_manifests.py
        for key, encoded in secret["data"].items():
            value = base64.b64decode(encoded).decode()
            url = urlsplit(value)
            # A credential (the value itself, or a URL's password) must say it is dev-only.
            credential = url.password if url.scheme and url.netloc else value
            if url.scheme and url.netloc and credential is None:
                continue
            assert "dev-only" in credential or "devonly" in credential, f"{secret['metadata']['name']}:{key}"


def test_simulations_run_on_a_queue_only_the_simulator_consumes(objects):
    """Queued simulations never wait behind, or delay, a scheduling cycle (issue 29)."""
    from django.conf import settings

    queue = settings.HAMIADMIN["SIMULATE_QUEUE"]

    def consumed(name: str) -> list[str]:
        [container] = find(objects, "Deployment", name)["spec"]["template"]["spec"]["containers"]
        argv = command_of(container)
        assert argv[:4] == ["celery", "-A", "hamiadmin", "worker"], name
        return argv[argv.index("-Q") + 1].split(",")

    assert consumed("hamiadmin-simulator") == [queue]
    assert queue not in consumed("hamiadmin-worker")


def test_node_pools_run_a_planner_per_listed_pool_on_its_own_queue():
    """The node-pools overlay: every pool of HAMI_NODE_POOLS has one worker Deployment started
    with HAMI_NODE_POOL set to it, consuming only that pool's queue (`pools.pool_queue`, where
    beat and every request send its cycles); the default workers consume no pool's queue, and
    web, workers and beat read the same list (docs/deploy.md, *Node pools*)."""
    from scheduling.pipeline import pools

    objects = render_overlay("node-pools")

    def app_container(name: str) -> dict:
        return find(objects, "Deployment", name)["spec"]["template"]["spec"]["containers"][0]

    listed = resolved_env(app_container("hamiadmin-beat"), objects)["HAMI_NODE_POOLS"]
    assert listed and resolved_env(app_container("hamiadmin-web"), objects)["HAMI_NODE_POOLS"] == listed
    planners: dict[str, list[str]] = {}
    for owner in objects:
        if owner["kind"] != "Deployment":
            continue
        name = owner["metadata"]["name"]
        for container in owner["spec"]["template"]["spec"]["containers"]:
            argv = command_of(container)
            if argv[:4] != ["celery", "-A", "hamiadmin", "worker"]:
                continue
            env = resolved_env(container, objects)
            assert env.get("HAMI_NODE_POOLS") == listed, name
            queues = argv[argv.index("-Q") + 1].split(",")
            pool = env.get("HAMI_NODE_POOL", "")
            if pool:
                assert queues == [pools.pool_queue(pool)], name
                planners.setdefault(pool, []).append(name)
            else:
                assert not any(queue.startswith(pools.QUEUE_PREFIX) for queue in queues), name
    assert {pool: len(names) for pool, names in planners.items()} == dict.fromkeys(listed.split(","), 1)
