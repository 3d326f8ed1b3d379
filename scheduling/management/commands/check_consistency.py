"""`manage.py check_consistency [--repair] [--kubernetes]`: counters against allocations,
ghost allocations, placed pods holding no card, cards over capacity; with `--kubernetes`,
also the pods the API server lists against the tables (`kube.reconcile`): pods bound there
by HAMi's rules but not placed here, pods placed here that it no longer has (each
confirmed by a GET of the pod before it counts).

Prints one line per finding and exits 1 when anything was found (0 when clean), so it can
gate a deploy or a cron job. With `--repair` the drift is fixed through
`services.repair_consistency` and the check is run again; the exit status is then that of
the second check. Findings are recorded as events and metrics either way.

Kubernetes is reached through `--kubeconfig` (else HAMI_KUBECONFIG, else the pod's service
account) or `--kube-host` (a plain URL: `kubectl proxy`, the tests' stand-in server).
"""

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from scheduling import services
from scheduling.pipeline import consistency


class Command(BaseCommand):
    help = "Check counters, allocations and pods for drift; --repair fixes it. Exit 1 when drift remains."

    def add_arguments(self, parser):
        parser.add_argument("--repair", action="store_true", help="fix the drift found, then check again")
        parser.add_argument(
            "--kubernetes", action="store_true", help="also compare the pods the Kubernetes API server lists"
        )
        parser.add_argument(
            "--kubeconfig", help="kubeconfig file (default: HAMI_KUBECONFIG, else in-cluster)"
        )
        parser.add_argument("--context", help="kubeconfig context (default: the current one)")
        parser.add_argument("--kube-host", help="API server URL without credentials (kubectl proxy)")

    def handle(self, *args, **options):
        api = self._kube_api(options)
        found = self._check(api, options)
        consistency.report(found, actor="manage.py check_consistency")
        for line in found.lines():
            self.stdout.write(line)
        if found.clean:
            self.stdout.write(
                "consistent: counters equal the active allocations, no ghost, no card over capacity"
                + (", Kubernetes agrees" if found.kubernetes_checked else "")
            )
            return
        if not options["repair"]:
            self.stdout.write(self._summary(found))
            raise SystemExit(1)
        repair = services.repair_consistency(actor="manage.py check_consistency --repair", kubernetes=found)
        for key in repair.vanished_released:
            self.stdout.write(f"repaired pod/{key}: released, Kubernetes no longer has it")
        for uuid in repair.counters_fixed:
            self.stdout.write(f"repaired card/{uuid}: counters set to its active allocations")
        for key, uuids in repair.ghosts_released.items():
            self.stdout.write(f"repaired pod/{key}: released {', '.join(uuids)}")
        for key in repair.requeued:
            self.stdout.write(f"repaired pod/{key}: back in the queue")
        for key in repair.left_alone:
            self.stdout.write(f"left pod/{key}: running with no card; release or resubmit it by hand")
        for key in repair.unknown_left:
            self.stdout.write(
                f"left pod/{key}: bound in Kubernetes but not placed here; hamiadmin does not adopt"
                " pods: delete it, or cordon its cards until it ends"
            )
        after = self._check(api, options)
        if after.clean:
            self.stdout.write("consistent after repair")
            return
        for line in after.lines():
            self.stdout.write(f"still: {line}")
        raise SystemExit(1)

    @staticmethod
    def _kube_api(options):
        if not (options["kubernetes"] or options["kubeconfig"] or options["kube_host"]):
            return None
        from kube.api import api_for_host, api_from_config

        try:
            if options["kube_host"]:
                return api_for_host(options["kube_host"])
            return api_from_config(
                options["kubeconfig"] or settings.HAMIADMIN.get("KUBECONFIG") or None, options["context"]
            )
        except Exception as exc:  # noqa: BLE001 - the config loaders raise many kinds
            raise CommandError(f"--kubernetes: no usable Kubernetes configuration: {exc}") from exc

    @staticmethod
    def _check(api, options) -> consistency.ConsistencyReport:
        if api is None:
            return consistency.check()
        from kube.api import ApiError, ApiUnavailable
        from kube.reconcile import check_against

        try:
            names = settings.HAMIADMIN.get("SCHEDULER_NAMES") or (settings.HAMIADMIN["SCHEDULER_NAME"],)
            return check_against(api, tuple(names))
        except (ApiError, ApiUnavailable) as exc:
            raise CommandError(f"--kubernetes: listing the pods failed: {exc}") from exc

    @staticmethod
    def _summary(found) -> str:
        counts = ", ".join(f"{kind} {count}" for kind, count in found.counts().items() if count)
        return f"drift found ({counts}); run with --repair to fix it"
