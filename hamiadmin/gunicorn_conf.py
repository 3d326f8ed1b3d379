"""gunicorn settings for the web process: `gunicorn hamiadmin.wsgi:application -c python:hamiadmin.gunicorn_conf`.

Every gunicorn the deployment starts (deploy/Dockerfile, compose, the Kubernetes manifests)
loads this module, so:

- **Access and error lines never carry the extender token.** kube-scheduler can only put it
  in the URL (`/extender/key/<token>/filter`), and gunicorn writes request lines itself,
  outside Django's logging; `RedactingLogger` runs them through the filter that redacts the
  application's own logs (hamiadmin.logging.RedactPathSecrets).
- **A slow request does not hold a whole worker.** Threaded workers (`gthread`, WEB_THREADS
  threads each, default 4) keep agent reports and extender calls answered while another
  thread runs a simulation; what a request may cost is bounded in the API itself
  (HAMI_SIMULATE_SYNC_MAX_WORK, HAMI_SIMULATE_SYNC_SECONDS, and HAMI_SIMULATE_SYNC_CONCURRENCY
  simulations at once per process; docs/deploy.md).

Workers: WEB_CONCURRENCY (gunicorn reads it itself). WEB_TIMEOUT (default 60) is how long a
worker may go silent before the arbiter restarts it.
"""

from __future__ import annotations

import os

from gunicorn.glogging import Logger

from hamiadmin.logging import RedactPathSecrets


class RedactingLogger(Logger):
    """gunicorn's logger with `/extender/key/<token>/` redacted from every access and error line."""

    redaction = RedactPathSecrets()

    def setup(self, cfg):
        super().setup(cfg)
        for log in (self.access_log, self.error_log):
            log.addFilter(self.redaction)  # once: addFilter ignores a filter already there


logger_class = RedactingLogger
worker_class = "gthread"
threads = int(os.environ.get("WEB_THREADS", "4"))
timeout = int(os.environ.get("WEB_TIMEOUT", "60"))
