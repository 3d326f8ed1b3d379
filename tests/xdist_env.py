"""Loaded as a plugin (`-p tests.xdist_env`) before Django's settings are read: under
pytest-xdist each test worker gets a Redis database of its own (cycle flags, leases, the
shared cache, Celery queues), so workers never see each other's keys. Databases need
nothing: pytest-django gives each worker its own test database.

The standing snapshot's garbage-collector freeze (HAMI_GC_FREEZE) is off unless a test turns
it on: it runs a full collection after every rebuild, and the suite rebuilds per test (about
80 ms each over a test process's heap)."""

import os
from urllib.parse import urlparse, urlunparse

os.environ.setdefault("HAMI_GC_FREEZE", "false")

worker = os.environ.get("PYTEST_XDIST_WORKER", "")
url = os.environ.get("REDIS_URL", "")
if worker.startswith("gw") and url:
    parsed = urlparse(url)
    base = int(parsed.path.strip("/") or 0)
    os.environ["REDIS_URL"] = urlunparse(parsed._replace(path=f"/{base + 1 + int(worker[2:])}"))
