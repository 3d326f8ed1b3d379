"""Settings: one module, every deployment-specific value read from the environment.

HAMIADMIN_ENV=production turns on the production posture (DEBUG off, secure cookies,
HSTS, a required SECRET_KEY). Without it the embedded default runs: SQLite in var/,
and a broker that needs no server.
"""

import os
from pathlib import Path
from typing import Any

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(os.environ.get("HAMIADMIN_VAR_DIR", BASE_DIR / "var"))


def env_bool(name: str, default: bool = False) -> bool:
    value = os.environ.get(name)
    if value is None:
        return default
    return value.strip().lower() in {"1", "true", "yes", "on"}


def env_list(name: str, default: str = "") -> list[str]:
    return [item.strip() for item in os.environ.get(name, default).split(",") if item.strip()]


def _env_number(name: str, default, kind):
    value = (os.environ.get(name) or "").strip() or str(default)
    try:
        return kind(value)
    except ValueError:
        words = "a whole number" if kind is int else "a number"
        raise ImproperlyConfigured(f"{name} must be {words}, got {value!r}") from None


def env_int(name: str, default) -> int:
    """A whole number from the environment; empty means the default, a malformed one stops
    start-up naming the variable."""
    return _env_number(name, default, int)


def env_float(name: str, default) -> float:
    """A number from the environment, as `env_int`."""
    return _env_number(name, default, float)


def env_rate(name: str, default: str) -> str:
    """A DRF throttle rate (`N/s`, `N/min`, `N/hour`, `N/day`) from the environment; empty
    means the default. A malformed one stops start-up naming the variable, instead of every
    throttled request failing later."""
    value = (os.environ.get(name) or "").strip() or default
    count, _, period = value.partition("/")
    if not count.isdigit() or not period or period[0] not in "smhd":
        raise ImproperlyConfigured(f"{name} must look like 600/s, 30/min, 20/hour or 1000/day, got {value!r}")
    return value


PRODUCTION = os.environ.get("HAMIADMIN_ENV", "development").strip().lower() == "production"

if PRODUCTION:
    SECRET_KEY = os.environ["SECRET_KEY"]
else:
    SECRET_KEY = os.environ.get("SECRET_KEY", "dev-only-insecure-key-set-SECRET_KEY-in-production")

# Off unless asked for (DEBUG=true): it costs ~1.5 ms a request and shows Django's debug pages
# instead of the project's own (issue 29).
DEBUG = env_bool("DEBUG", default=False)
ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", "" if PRODUCTION else "127.0.0.1,localhost,testserver,[::1]")
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS")

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "rest_framework.authtoken",
    "django_filters",
    "django_tables2",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "scheduling",
]

MIDDLEWARE = [
    "hamiadmin.path_secrets.RedactPathSecretsInAnswers",
    "django.middleware.security.SecurityMiddleware",
    "hamiadmin.auth_failures.FailedCredentialsThrottle",
    "hamiadmin.dbtimeouts.BoundedLockWaits",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

# The admission webhook's TLS server (deploy/k8s: the web pod's `webhook` container) serves
# only the webhook, its probes and metrics: HAMIADMIN_URLCONF=kube.webhook.urls.
ROOT_URLCONF = os.environ.get("HAMIADMIN_URLCONF", "hamiadmin.urls")
WSGI_APPLICATION = "hamiadmin.wsgi.application"
ASGI_APPLICATION = "hamiadmin.asgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

_default_sqlite = f"sqlite:///{VAR_DIR / 'hamiadmin.sqlite3'}"
DATABASES = {
    "default": dj_database_url.parse(
        os.environ.get("DATABASE_URL", _default_sqlite),
        conn_max_age=env_int("DB_CONN_MAX_AGE", "60"),
    )
}
if DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql":
    # A session left idle inside a transaction (a process stopped, a pipe full) is ended by the
    # server after this long, so the row and cycle locks it holds come free (issue 29); 0: off.
    _idle = env_int("HAMI_DB_IDLE_IN_TRANSACTION_SECONDS", "60")
    _options = DATABASES["default"].setdefault("OPTIONS", {})
    if _idle > 0:
        _options["options"] = (
            _options.get("options", "") + f" -c idle_in_transaction_session_timeout={_idle * 1000}"
        ).strip()
    # Every session waits at most this long for a row lock (workers, the Kubernetes agent);
    # web requests wait less (DB_WEB_LOCK_TIMEOUT_MS, hamiadmin.dbtimeouts), a cycle's commit
    # its own (HAMI_COMMIT_LOCK_TIMEOUT_MS); 0: no bound.
    _lock_wait = env_int("HAMI_DB_LOCK_TIMEOUT_MS", "5000")
    if _lock_wait > 0:
        _options["options"] = (_options.get("options", "") + f" -c lock_timeout={_lock_wait}").strip()
    # Values bound by the server, and a statement a session has run HAMI_DB_PREPARE_AFTER
    # times kept prepared there: the requests' and cycles' few statements of fixed shape are
    # parsed and planned once per session, not once per call (0: bound on the client as
    # Django does by default, nothing prepared).
    _prepare_after = env_int("HAMI_DB_PREPARE_AFTER", "2")
    if _prepare_after > 0:
        _options.setdefault("server_side_binding", True)
        _options.setdefault("prepare_threshold", _prepare_after)
#: How long a web request waits for a row lock before answering 503 (PostgreSQL; 0: the
#: session default above). Well under a second: a stalled commit must not hold web threads.
DB_WEB_LOCK_TIMEOUT_MS = env_int("HAMI_DB_WEB_LOCK_TIMEOUT_MS", "500")
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # Several writers (web, scheduler thread, agents) share one file: wait for the lock
    # instead of failing, and take the write lock at BEGIN so a cycle's re-check is atomic.
    DATABASES["default"]["CONN_MAX_AGE"] = 0
    DATABASES["default"].setdefault("OPTIONS", {}).update(
        {"timeout": 30, "transaction_mode": "IMMEDIATE", "init_command": "PRAGMA journal_mode=WAL;"}
    )
    DATABASES["default"].setdefault("TEST", {})["NAME"] = str(VAR_DIR / "test-hamiadmin.sqlite3")

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = Path(os.environ.get("STATIC_ROOT", VAR_DIR / "static"))
STATICFILES_DIRS = [BASE_DIR / "static"] if (BASE_DIR / "static").is_dir() else []
# gunicorn serves static files itself through WhiteNoise; in development it reads them from the finders.
WHITENOISE_USE_FINDERS = DEBUG or not PRODUCTION
if not PRODUCTION:
    # The embedded default keeps its SQLite file and broker folder here; WhiteNoise warns
    # about a missing static root.
    VAR_DIR.mkdir(parents=True, exist_ok=True)
    STATIC_ROOT.mkdir(parents=True, exist_ok=True)

LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "/"
LOGOUT_REDIRECT_URL = "login"

# --- Redis and Celery -------------------------------------------------------
REDIS_URL = os.environ.get("REDIS_URL", "")
if REDIS_URL:
    CELERY_BROKER_URL = REDIS_URL
    CELERY_RESULT_BACKEND: str | None = REDIS_URL
else:
    # Embedded default: kombu's filesystem transport needs no server.
    _broker_dir = VAR_DIR / "broker"
    CELERY_BROKER_URL = "filesystem://"
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        "data_folder_in": str(_broker_dir / "queue"),
        "data_folder_out": str(_broker_dir / "queue"),
        "processed_folder": str(_broker_dir / "processed"),
        "control_folder": str(_broker_dir / "control"),
        "store_processed": False,
    }
    CELERY_RESULT_BACKEND = None
# "default" is this process's memory (DRF's per-endpoint throttles); "shared" is seen by every
# process (failed-credential counters, queued simulations, the token-writes and login rate
# limits): Redis with REDIS_URL, else this process's memory too, which is all the embedded
# default has. "default" stays local: clearing a RedisCache flushes its whole database.
CACHES = {
    "default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"},
    "shared": (
        {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": REDIS_URL,
            "KEY_PREFIX": "hamiadmin",
        }
        if REDIS_URL
        else {"BACKEND": "django.core.cache.backends.locmem.LocMemCache", "LOCATION": "hamiadmin-shared"}
    ),
}
CELERY_TASK_IGNORE_RESULT = True
CELERY_TASK_ACKS_LATE = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_TIMEZONE = "UTC"

# --- Scheduler --------------------------------------------------------------
# HAMi's own configuration keys, from a mounted file (HAMI_CONFIG_FILE) or HAMI_CONFIG
# (hamiadmin/hamiconfig.py, docs/migrating-from-hami.md). Its policies win over the HAMI_* ones below.
from hamiadmin.hamiconfig import load as _load_hami_config  # noqa: E402 - pure, reads no setting

HAMI_CONFIG = _load_hami_config(os.environ)
#: The scheduler's own settings (one value type per key: numbers, names, flags; read by key).
HAMIADMIN: dict[str, Any] = {
    "NODE_SCHEDULER_POLICY": HAMI_CONFIG.node_scheduler_policy
    or os.environ.get("HAMI_NODE_SCHEDULER_POLICY", "binpack"),
    "GPU_SCHEDULER_POLICY": HAMI_CONFIG.gpu_scheduler_policy
    or os.environ.get("HAMI_GPU_SCHEDULER_POLICY", "spread"),
    "HAMI_CONFIG": HAMI_CONFIG,
    "SAFETY_CYCLE_SECONDS": env_float("HAMI_SAFETY_CYCLE_SECONDS", "5"),
    "HEARTBEAT_TIMEOUT_SECONDS": env_float("HAMI_HEARTBEAT_TIMEOUT_SECONDS", "60"),
    "DECISIONS_PER_POD": env_int("HAMI_DECISIONS_PER_POD", "20"),
    # Single-flight (scheduling/locks.py): auto = PostgreSQL advisory lock on PostgreSQL, else a
    # Redis lease (renewed by its holder every third of the timeout), else process-local.
    "CYCLE_LOCK": os.environ.get("HAMI_CYCLE_LOCK", "auto"),
    "CYCLE_LOCK_TIMEOUT_SECONDS": env_float("HAMI_CYCLE_LOCK_TIMEOUT_SECONDS", "3"),
    "CYCLE_LOCK_LEASE_SECONDS": env_float("HAMI_CYCLE_LOCK_LEASE_SECONDS", "15"),
    "COMMIT_LOCK_TIMEOUT_MS": env_int("HAMI_COMMIT_LOCK_TIMEOUT_MS", "2000"),
    # Node-pool shards (scheduling/pipeline/pools.py, docs/architecture.md): the pools planners
    # run for (same list everywhere), the label naming a node's pool, and this planner's pool
    # (empty: the planner of every pod that selects none of them, on every node).
    "NODE_POOLS": env_list("HAMI_NODE_POOLS"),
    "NODE_POOL_LABEL": os.environ.get("HAMI_NODE_POOL_LABEL", "hami.io/node-pool").strip()
    or "hami.io/node-pool",
    "NODE_POOL": os.environ.get("HAMI_NODE_POOL", "").strip(),
    "SCHEDULER_NAME": os.environ.get("HAMI_SCHEDULER_NAME", "hami-scheduler"),
    # Every spec.schedulerName hamiadmin serves (docs/kubernetes.md, *Routing operators*), e.g.
    # `hami-scheduler,volcano`; SCHEDULER_NAME is always among them (the one the webhook writes).
    "SCHEDULER_NAMES": tuple(
        dict.fromkeys(
            name.strip()
            for name in (
                os.environ.get("HAMI_SCHEDULER_NAME", "hami-scheduler"),
                *os.environ.get("HAMI_SCHEDULER_NAMES", "").split(","),
            )
            if name.strip()
        )
    ),
    # Gangs from owners (kube/owners.py, docs/queues.md): `all` groups pods by their top
    # controller in every namespace, `none` only in namespaces labelled
    # hami.io/gangs-from-owners=true (a namespace labelled "false" is left out under `all`).
    "GANGS_FROM_OWNERS": os.environ.get("HAMI_GANGS_FROM_OWNERS", "none").strip().lower(),
    # Pipeline (scheduling/pipeline): cycle size, back-off, triggers, history bounds.
    "SINGLE_FLIGHT": env_bool("HAMI_SINGLE_FLIGHT", True),
    "CYCLE_MAX_PODS": env_int("HAMI_CYCLE_MAX_PODS", "1000"),
    "DECISION_TOP": env_int("HAMI_DECISION_TOP", "20"),
    "CLOSEST_NODES": env_int("HAMI_CLOSEST_NODES", "5"),
    "BACKOFF_BASE_SECONDS": env_float("HAMI_BACKOFF_BASE_SECONDS", "0.5"),
    "BACKOFF_MAX_SECONDS": env_float("HAMI_BACKOFF_MAX_SECONDS", "30"),
    "LOOP_POLL_SECONDS": env_float("HAMI_LOOP_POLL_SECONDS", "0.5"),
    "TRIGGER_DEBOUNCE_MS": env_int("HAMI_TRIGGER_DEBOUNCE_MS", "100"),
    "HOUSEKEEPING_SECONDS": env_float("HAMI_HOUSEKEEPING_SECONDS", "30"),
    "CYCLES_KEPT": env_int("HAMI_CYCLES_KEPT", "10000"),
    # A worker keeps its snapshot between cycles and reads only what changed (pipeline/standing.py);
    # it reads the cluster whole at least this often all the same.
    "SNAPSHOT_KEEP": env_bool("HAMI_SNAPSHOT_KEEP", True),
    "SNAPSHOT_REBUILD_SECONDS": env_float("HAMI_SNAPSHOT_REBUILD_SECONDS", "300"),
    # the standing snapshot and warmed caches out of the garbage collector's sweeps (issue 29)
    "GC_FREEZE": env_bool("HAMI_GC_FREEZE", True),
    # a cycle's decision rows written after its commit, beside the next cycle's planning
    # (pipeline/decisionlog.py; PostgreSQL only, issue 29)
    "DECISIONS_AFTER_COMMIT": env_bool("HAMI_DECISIONS_AFTER_COMMIT", True),
    "FINISHED_PODS_KEPT_HOURS": env_float("HAMI_FINISHED_PODS_KEPT_HOURS", "168"),
    # Batch (engine/jobs.py): a job still unplaced after this long holds the nodes it came
    # closest on for the rest of each cycle, so smaller jobs cannot starve it; <= 0: never.
    "RESERVE_AFTER_SECONDS": env_float("HAMI_RESERVE_AFTER_SECONDS", "300"),
    # Preemption within a queue and reclaim across queues (engine/preempt.py, docs/preemption.md):
    # victims at or above PREEMPT_PROTECT_PRIORITY (Kubernetes' system classes by default) or
    # younger than the min runtime are never evicted; at most PREEMPT_MAX_CARDS_PER_CYCLE cards
    # are freed per cycle; a victim not gone after PREEMPT_GRACE_SECONDS makes its preemptor
    # try again; dry run explains what would be evicted and evicts nothing.
    "PREEMPTION": env_bool("HAMI_PREEMPTION", True),
    "RECLAIM": env_bool("HAMI_RECLAIM", True),
    "PREEMPT_DRY_RUN": env_bool("HAMI_PREEMPT_DRY_RUN", False),
    "PREEMPT_MIN_RUNTIME_SECONDS": env_float("HAMI_PREEMPT_MIN_RUNTIME_SECONDS", "0"),
    "PREEMPT_PROTECT_PRIORITY": env_int("HAMI_PREEMPT_PROTECT_PRIORITY", "2000000000"),
    "PREEMPT_MAX_CARDS_PER_CYCLE": env_int("HAMI_PREEMPT_MAX_CARDS_PER_CYCLE", "64"),
    "PREEMPT_GRACE_SECONDS": env_float("HAMI_PREEMPT_GRACE_SECONDS", "120"),
    # Opt-in: a pod that fits nowhere may have one or two tenants hamiadmin runs itself moved
    # to other nodes, each with its new home held first (engine/consolidate.py).
    "CONSOLIDATION": env_bool("HAMI_CONSOLIDATION", False),
    # Test-only fault hook: sleep inside the commit after writing allocations (0 = off).
    "FAULT_COMMIT_PAUSE_SECONDS": env_float("HAMI_FAULT_COMMIT_PAUSE_SECONDS", "0"),
    # Kubernetes integration (kube, docs/kubernetes.md).
    "EXTENDER_TOKEN": os.environ.get("HAMI_EXTENDER_TOKEN", ""),
    "KUBECONFIG": os.environ.get("HAMI_KUBECONFIG", ""),
    "BIND_PHASE_SUCCESS": env_bool("HAMI_BIND_PHASE_SUCCESS", True),
    # HAMi's node lock (hami.io/mutex.lock, kube/nodelock.py) around each bind: how long a lock
    # whose pod still waits is honoured before it is taken over; 0 turns the lock off.
    "NODE_LOCK_SECONDS": env_float("HAMI_NODE_LOCK_SECONDS", "15"),
    # Dynamic Resource Allocation (kube/dra.py): the drivers whose ResourceSlices are cards.
    "DRA_DRIVERS": env_list("HAMI_DRA_DRIVERS", "hami-core-gpu.project-hami.io,gpu.nvidia.com"),
    # The agent runs the DRA pass (watcher mode): off until a cluster's drivers are HAMi's.
    "DRA": env_bool("HAMI_DRA", False),
    # HAMi's vGPU monitor read for measured usage on HAMi's nodes (kube/vgpumonitor.py): `off`,
    # `proxy` (the API server's pod proxy) or a URL template (`http://{pod_ip}:9394/metrics`).
    "VGPU_MONITOR": os.environ.get("HAMI_VGPU_MONITOR", "off").strip(),
    "VGPU_MONITOR_SECONDS": max(1.0, env_float("HAMI_VGPU_MONITOR_SECONDS", "15")),
    "VGPU_MONITOR_SELECTOR": os.environ.get(
        "HAMI_VGPU_MONITOR_SELECTOR", "app.kubernetes.io/component=hami-device-plugin"
    ),
    # Admission webhook (kube/webhook, docs/kubernetes.md): `all` sets schedulerName on GPU pods
    # that name none, default-scheduler or hami-scheduler; `off` leaves it to the pods.
    "WEBHOOK_SCHEDULER_NAME": os.environ.get("HAMI_WEBHOOK_SCHEDULER_NAME", "all").strip().lower(),
    # NVIDIA_VISIBLE_DEVICES=none on the containers that ask no GPU (HAMi's overwriteEnv; off
    # by default, as in HAMi's chart).
    "WEBHOOK_HIDE_GPUS": env_bool("HAMI_WEBHOOK_HIDE_GPUS", bool(HAMI_CONFIG.overwrite_env)),
    "WEBHOOK_RUNTIME_CLASS": os.environ.get(
        "HAMI_WEBHOOK_RUNTIME_CLASS", HAMI_CONFIG.runtime_class_name or ""
    ),
    # JSON: {"namespace": {"hami.io/gpu-scheduler-policy": "binpack", ...}}, added where a pod has none.
    "WEBHOOK_NAMESPACE_POLICIES": os.environ.get("HAMI_WEBHOOK_NAMESPACE_POLICIES", ""),
    # Where the webhook routes pods of device families hamiadmin does not schedule (Ascend,
    # Hygon...: kube/webhook/families.py): HAMi's scheduler kept running for them. Empty, or
    # one of hamiadmin's own names, routes nothing (docs/migrating-from-hami.md).
    "WEBHOOK_OTHER_FAMILIES_SCHEDULER": os.environ.get(
        "HAMI_OTHER_FAMILIES_SCHEDULER", "hami-scheduler"
    ).strip(),
    "WEBHOOK_MAX_BODY_BYTES": env_int("HAMI_WEBHOOK_MAX_BODY_BYTES", str(16 * 1024 * 1024)),
    # Observability (docs/deploy.md): a bearer token for /metrics; without one /metrics is open
    # in development and closed (403) in production.
    "METRICS_TOKEN": os.environ.get("HAMI_METRICS_TOKEN", ""),
    # HAMi's pre-2.9 metric names beside its current ones, as its `--legacy-metrics` (off in
    # v2.10): scheduling/ops/hami_metrics.py.
    "LEGACY_METRICS": env_bool("HAMI_LEGACY_METRICS", False),
    # POST simulate/ (docs/api.md): work = pods x (nodes + cards) + topology-aware's combination
    # steps. Up to SYNC_MAX_WORK it runs in the request (stopped after SYNC_SECONDS, at most
    # SYNC_CONCURRENCY at once per process); up to MAX_WORK in a Celery worker on SIMULATE_QUEUE
    # (202 and a result URL); above, 413.
    "SIMULATE_MAX_BODY_BYTES": env_int("HAMI_SIMULATE_MAX_BODY_BYTES", str(2 * 1024 * 1024)),
    "SIMULATE_SYNC_MAX_WORK": env_int("HAMI_SIMULATE_SYNC_MAX_WORK", "500000"),
    "SIMULATE_MAX_WORK": env_int("HAMI_SIMULATE_MAX_WORK", "25000000"),
    "SIMULATE_SYNC_SECONDS": env_float("HAMI_SIMULATE_SYNC_SECONDS", "5"),
    "SIMULATE_SYNC_CONCURRENCY": env_int("HAMI_SIMULATE_SYNC_CONCURRENCY", "1"),
    "SIMULATE_TIME_LIMIT_SECONDS": env_float("HAMI_SIMULATE_TIME_LIMIT_SECONDS", "300"),
    "SIMULATE_RESULT_SECONDS": env_int("HAMI_SIMULATE_RESULT_SECONDS", "3600"),
    "SIMULATE_QUEUE": os.environ.get("HAMI_SIMULATE_QUEUE", "simulations"),
    # Failed credentials per client address (hamiadmin/auth_failures.py): 0 switches it off.
    "AUTH_FAILURE_LIMIT": env_int("HAMI_AUTH_FAILURE_LIMIT", "10"),
    "AUTH_FAILURE_WINDOW_SECONDS": env_int("HAMI_AUTH_FAILURE_WINDOW_SECONDS", "300"),
    # What an API token stands for (its user and role) is kept this long per process
    # (scheduling/api/authentication.py): a token revoked or a role changed takes effect in
    # the other processes within it. 0: read on every request.
    "TOKEN_CACHE_SECONDS": env_float("HAMI_TOKEN_CACHE_SECONDS", "5"),
}

# Celery beat: the safety cycle and housekeeping (scheduling/tasks.py).
# The scheduler also touches beat's heartbeat file for its liveness probe (scheduling/liveness.py).
CELERY_BEAT_SCHEDULER = "scheduling.ops.celery_process:HeartbeatScheduler"
CELERY_BEAT_SCHEDULE = {
    "safety-cycle": {
        "task": "scheduling.safety_cycle",
        "schedule": HAMIADMIN["SAFETY_CYCLE_SECONDS"],
        "options": {"expires": HAMIADMIN["SAFETY_CYCLE_SECONDS"]},
    },
    "housekeeping": {
        "task": "scheduling.housekeeping",
        "schedule": HAMIADMIN["HOUSEKEEPING_SECONDS"],
        "options": {"expires": HAMIADMIN["HOUSEKEEPING_SECONDS"]},
    },
    # each node pool's planner gets its own safety cycle, on its own queue: pools.pool_queue's
    # name, written out because settings cannot import the pipeline (test_pools checks both)
    **{
        f"safety-cycle-{pool}": {
            "task": "scheduling.safety_cycle",
            "schedule": HAMIADMIN["SAFETY_CYCLE_SECONDS"],
            "options": {"expires": HAMIADMIN["SAFETY_CYCLE_SECONDS"], "queue": f"hamiadmin-pool-{pool}"},
        }
        for pool in dict.fromkeys(HAMIADMIN["NODE_POOLS"])
    },
}

# --- REST framework ---------------------------------------------------------
REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        # DRF's TokenAuthentication, the key's user and role kept per process a few seconds
        "scheduling.api.authentication.CachedTokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_FILTER_BACKENDS": ["django_filters.rest_framework.DjangoFilterBackend"],
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "DEFAULT_PAGINATION_CLASS": "rest_framework.pagination.LimitOffsetPagination",
    "PAGE_SIZE": 100,
    # JSON only, and no body over DATA_UPLOAD_MAX_MEMORY_SIZE (DRF's parsers do not check it).
    "DEFAULT_PARSER_CLASSES": ["scheduling.api.parsers.BoundedJSONParser"],
    "EXCEPTION_HANDLER": "scheduling.api.errors.exception_handler",
    # Generous so demo agents, the tests and the load test (200 pods/s submitted and as many
    # released, one token) pass. token-writes, login and simulate-queued count in the shared
    # cache (every process together), the others per process.
    "DEFAULT_THROTTLE_RATES": {
        "agent-report": env_rate("HAMI_THROTTLE_REPORT", "600/min"),
        "pod-submit": env_rate("HAMI_THROTTLE_SUBMIT", "300/s"),
        # Every token-authenticated write, per token user (scheduling/api/throttles.py).
        "token-writes": env_rate("HAMI_THROTTLE_TOKEN_WRITES", "600/s"),
        # Sign-in forms sent to the dashboard, per client address, right or wrong.
        "login": env_rate("HAMI_THROTTLE_LOGIN", "30/min"),
        "simulate": env_rate("HAMI_THROTTLE_SIMULATE", "30/min"),
        # Simulations sent to a worker, per user, counted in the shared cache.
        "simulate-queued": env_rate("HAMI_THROTTLE_SIMULATE_QUEUED", "20/hour"),
    },
}

SPECTACULAR_SETTINGS = {
    "TITLE": "hamiadmin API",
    "DESCRIPTION": "GPU-sharing scheduler: agents, pods, allocations, decisions.",
    "VERSION": "1",
    "SERVE_INCLUDE_SCHEMA": False,
    "COMPONENT_SPLIT_REQUEST": True,
    "SCHEMA_PATH_PREFIX": r"/api/v[0-9]+",
    # Swagger UI and Redoc from drf-spectacular-sidecar's static files: no page needs the internet.
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    "ENUM_NAME_OVERRIDES": {
        "PodStatusEnum": "scheduling.api.schema.POD_STATUSES",
        "SimulatedStatusEnum": "scheduling.api.schema.SIMULATED_STATUSES",
        "ProbeStatusEnum": "scheduling.api.schema.PROBE_STATUSES",
        "SimulationJobStatusEnum": "scheduling.api.schema.SIMULATION_JOB_STATUSES",
    },
}

DATA_UPLOAD_MAX_MEMORY_SIZE = env_int("HAMI_MAX_BODY_BYTES", str(2 * 1024 * 1024))

# --- Production posture -------------------------------------------------------
# Each HTTPS setting `check --deploy` looks at comes from the environment under its own
# name; on by default in production (so the check is clean), off otherwise (so `make run`
# serves http://127.0.0.1:8000). tests/chaos/test_security.py runs the check.
SESSION_COOKIE_SECURE = env_bool("SESSION_COOKIE_SECURE", PRODUCTION)
CSRF_COOKIE_SECURE = env_bool("CSRF_COOKIE_SECURE", PRODUCTION)
SECURE_SSL_REDIRECT = env_bool("SECURE_SSL_REDIRECT", PRODUCTION)
SECURE_HSTS_SECONDS = env_int("SECURE_HSTS_SECONDS", "31536000" if PRODUCTION else "0")
SECURE_HSTS_INCLUDE_SUBDOMAINS = env_bool("SECURE_HSTS_INCLUDE_SUBDOMAINS", PRODUCTION)
SECURE_HSTS_PRELOAD = env_bool("SECURE_HSTS_PRELOAD", PRODUCTION)
SECURE_REDIRECT_EXEMPT = [r"^healthz$", r"^readyz$", r"^metrics$"]
if PRODUCTION:
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")

# JSON lines in production (or LOG_FORMAT=json), readable lines otherwise (hamiadmin/logging.py).
LOG_FORMAT = os.environ.get("LOG_FORMAT", "json" if PRODUCTION else "plain").strip().lower()
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {
        "plain": {"()": "hamiadmin.logging.ReadableFormatter"},
        "json": {"()": "hamiadmin.logging.JsonFormatter"},
    },
    "filters": {"redact_paths": {"()": "hamiadmin.logging.RedactPathSecrets"}},
    "handlers": {
        "console": {
            "class": "logging.StreamHandler",
            "formatter": "json" if LOG_FORMAT == "json" else "plain",
            "filters": ["redact_paths"],
        }
    },
    "root": {"handlers": ["console"], "level": os.environ.get("LOG_LEVEL", "INFO")},
    # Django's own lines (its default console handler would print paths unredacted when DEBUG
    # is on) and the development server's access lines go through the same redaction.
    "loggers": {
        "django": {"handlers": ["console"], "level": "INFO", "propagate": False},
        "django.server": {"handlers": ["console"], "level": "INFO", "propagate": False},
    },
}
