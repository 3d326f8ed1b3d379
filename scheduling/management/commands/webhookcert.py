"""`manage.py webhookcert --out DIR`: a self-signed pair for the admission webhook's TLS.

Writes DIR/tls.crt and DIR/tls.key (mode 0600), then prints the commands that put them in
the `hamiadmin-webhook-tls` Secret and the certificate into both webhook configurations'
`caBundle`. For clusters without cert-manager (which the `cert-manager` overlay uses instead).
"""

import base64
import os
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from kube.webhook.certs import NAMESPACE, SERVICE, self_signed, service_hosts

SECRET = "hamiadmin-webhook-tls"
CONFIGURATIONS = (
    ("mutatingwebhookconfiguration", "hamiadmin"),
    ("validatingwebhookconfiguration", "hamiadmin"),
)


class Command(BaseCommand):
    help = (
        "Write a self-signed certificate and key for the admission webhook (DIR/tls.crt, DIR/tls.key) "
        "and print how to install them: the Secret and the caBundle of both webhook configurations."
    )

    def add_arguments(self, parser):
        parser.add_argument("--out", required=True, help="folder to write tls.crt and tls.key into")
        parser.add_argument("--service", default=SERVICE, help=f"the webhook's Service (default {SERVICE})")
        parser.add_argument("--namespace", default=NAMESPACE, help=f"its namespace (default {NAMESPACE})")
        parser.add_argument("--host", action="append", default=[], help="another DNS name or IP address")
        parser.add_argument("--days", type=int, default=365, help="validity in days (default 365)")
        parser.add_argument("--organization", default="hamiadmin", help="the subject's organization")
        parser.add_argument("--force", action="store_true", help="overwrite an existing pair")

    def handle(self, *args, **options):
        out = Path(options["out"])
        crt, key = out / "tls.crt", out / "tls.key"
        if not options["force"] and (crt.exists() or key.exists()):
            raise CommandError(f"{crt} or {key} exists; --force to replace them")
        hosts = service_hosts(options["service"], options["namespace"]) + options["host"]
        try:
            cert_pem, key_pem = self_signed(hosts, options["days"], options["organization"])
        except ValueError as exc:
            raise CommandError(str(exc)) from None
        out.mkdir(parents=True, exist_ok=True)
        crt.write_bytes(cert_pem)
        descriptor = os.open(key, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(descriptor, "wb") as handle:
            handle.write(key_pem)
        bundle = base64.b64encode(cert_pem).decode()
        namespace = options["namespace"]
        self.stdout.write(f"wrote {crt} and {key} (valid {options['days']} days for {', '.join(hosts)})")
        self.stdout.write("install them:")
        self.stdout.write(
            f"  kubectl -n {namespace} create secret tls {SECRET} --cert {crt} --key {key} "
            "--dry-run=client -o yaml | kubectl apply -f -"
        )
        for kind, name in CONFIGURATIONS:
            self.stdout.write(
                f"  kubectl patch {kind} {name} --type json -p "
                f'\'[{{"op":"add","path":"/webhooks/0/clientConfig/caBundle","value":"{bundle}"}}]\''
            )
        self.stdout.write(f"caBundle: {bundle}")
