"""The Kubernetes agent in a process of its own, for the chaos suite to SIGKILL mid-bind.

    python -m tests.chaos.kube_agent --url http://127.0.0.1:PORT --identity NAME

The same `KubeAgent` and `LeaderElector` as `python -m kube`, pointed at the stand-in API
server by URL (no kubeconfig), with the Lease shortened to 1 s and the loop's periods of
tests/kube's `fast_options`: a successor takes over within seconds, not the 15 s a real
Lease lasts, so twenty kills fit in a test. SIGTERM stops it cleanly; SIGKILL is the fault.
"""

from __future__ import annotations

import argparse
import os
import signal
import threading

import django

LEASE_SECONDS = 1.0


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--url", required=True)
    parser.add_argument("--identity", required=True)
    parser.add_argument("--lease-name", default="kube-agent")
    args = parser.parse_args()
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "hamiadmin.settings")
    django.setup()

    from kube.agent import KubeAgent
    from kube.api import api_for_host
    from kube.leader import LeaderElector
    from tests.kube.conftest import fast_options

    api = api_for_host(args.url)
    elector = LeaderElector(
        api,
        "default",
        args.lease_name,
        args.identity,
        lease_duration=LEASE_SECONDS,
        renew_deadline=LEASE_SECONDS / 2,
        retry_period=0.1,
    )
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    KubeAgent(api, fast_options(), elector, args.identity).run(stop)


if __name__ == "__main__":
    main()
