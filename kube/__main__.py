"""Command line of the Kubernetes agent.

    python -m kube [--kubeconfig FILE] [--scheduler-name hami-scheduler]
                          [--namespace NS] [--lease-name NAME] [--identity ID] [--extender]

In-cluster configuration (the pod's service account) unless --kubeconfig is given.
Stops cleanly on SIGTERM/SIGINT, releasing the Lease. Logs go to stderr as JSON lines
with LOG_FORMAT=json (the default when HAMIADMIN_ENV=production). Exit codes: 0 stopped,
2 bad flags or no usable Kubernetes configuration.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import socket
import sys
import threading

EXIT_USAGE = 2
NAMESPACE_FILE = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"

log = logging.getLogger("hamiadmin.kube")


def default_namespace() -> str:
    """$POD_NAMESPACE, else the service account's namespace, else `default`."""
    if os.environ.get("POD_NAMESPACE"):
        return os.environ["POD_NAMESPACE"]
    try:
        with open(NAMESPACE_FILE, encoding="utf-8") as handle:
            return handle.read().strip() or "default"
    except OSError:
        return "default"


def build_parser(default_scheduler: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m kube",
        description="Sync pods and nodes with Kubernetes, bind placed pods, write events.",
    )
    parser.add_argument("--kubeconfig", help="kubeconfig file (default: in-cluster service account)")
    parser.add_argument("--context", help="kubeconfig context (default: the current one)")
    parser.add_argument(
        "--scheduler-name",
        default=default_scheduler,
        help=f"spec.schedulerName of the pods to place (default {default_scheduler})",
    )
    parser.add_argument(
        "--namespace",
        default=None,
        help="namespace of the leader-election Lease (default: $POD_NAMESPACE, else this pod's namespace)",
    )
    parser.add_argument("--lease-name", default="hamiadmin-kube-agent", help="name of the Lease")
    parser.add_argument(
        "--identity",
        default=None,
        help="this replica's name in the Lease (default: $POD_NAME, else host name)",
    )
    parser.add_argument(
        "--extender",
        action="store_true",
        help="kube-scheduler places and binds through /extender/: only report nodes "
        "and release pods that end (watches all pods)",
    )
    parser.add_argument(
        "--watch-timeout", type=int, default=60, help="seconds per watch request (default 60)"
    )
    parser.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    return parser


def main(argv: list[str] | None = None) -> int:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "hamiadmin.settings")
    import django

    django.setup()
    from django.conf import settings

    from hamiadmin.logging import configure
    from scheduling.ops.metrics import serve_from_env as serve_metrics_from_env

    from .agent import AgentOptions, KubeAgent
    from .api import api_from_config
    from .leader import LeaderElector
    from .vgpumonitor import SELECTOR, MonitorSettingInvalid, parse_setting

    args = build_parser(settings.HAMIADMIN.get("SCHEDULER_NAME", "hami-scheduler")).parse_args(argv)
    configure(args.log_level, settings.LOG_FORMAT)  # JSON lines in production, like the web
    if args.watch_timeout < 1:
        print("--watch-timeout: must be at least 1 second", file=sys.stderr)
        return EXIT_USAGE
    try:
        api = api_from_config(args.kubeconfig, args.context)
    except Exception as exc:  # noqa: BLE001 - the config loaders raise many kinds
        print(f"no usable Kubernetes configuration: {exc}", file=sys.stderr)
        return EXIT_USAGE
    identity = args.identity or os.environ.get("POD_NAME") or socket.gethostname()
    namespace = args.namespace or default_namespace()
    elector = LeaderElector(api, namespace, args.lease_name, identity)
    gangs = settings.HAMIADMIN.get("GANGS_FROM_OWNERS", "none")
    if gangs not in ("all", "none"):
        print(f"HAMI_GANGS_FROM_OWNERS: must be all or none, got {gangs!r}", file=sys.stderr)
        return EXIT_USAGE
    try:
        parse_setting(settings.HAMIADMIN.get("VGPU_MONITOR", "off"))
    except MonitorSettingInvalid as exc:
        print(exc, file=sys.stderr)
        return EXIT_USAGE
    options = AgentOptions(
        scheduler_name=args.scheduler_name,
        other_scheduler_names=tuple(settings.HAMIADMIN.get("SCHEDULER_NAMES", ())),
        gangs_from_owners=gangs,
        extender=args.extender,
        watch_timeout=args.watch_timeout,
        resync_seconds=max(1.0, settings.HAMIADMIN.get("HEARTBEAT_TIMEOUT_SECONDS", 60.0) / 3),
        complete_bind_phase=settings.HAMIADMIN.get("BIND_PHASE_SUCCESS", True),
        dra=settings.HAMIADMIN.get("DRA", False),
        vgpu_monitor=settings.HAMIADMIN.get("VGPU_MONITOR", "off"),
        vgpu_monitor_seconds=settings.HAMIADMIN.get("VGPU_MONITOR_SECONDS", 15.0),
        vgpu_monitor_selector=settings.HAMIADMIN.get("VGPU_MONITOR_SELECTOR", SELECTOR),
    )
    agent = KubeAgent(api, options, elector, identity)
    serve_metrics_from_env("kube agent")  # bind failures, on HAMI_METRICS_PORT when set
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    log.info(
        "kube agent %s: scheduler %s, lease %s/%s%s",
        identity,
        ",".join(agent.scheduler_names),
        namespace,
        args.lease_name,
        " (extender mode)" if args.extender else "",
    )
    agent.run(stop)
    return 0


if __name__ == "__main__":
    sys.exit(main())
