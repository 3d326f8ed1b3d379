"""A self-signed serving certificate for the webhook: its own CA, so the certificate itself
is the `caBundle` the API server trusts (`manage.py webhookcert`, the tests' HTTPS server).

ECDSA P-256 (the API server and Python both speak it; keys are small and quick to make),
`serverAuth`, every name the API server may use for the Service (`svc`, `svc.ns`,
`svc.ns.svc`, `svc.ns.svc.cluster.local`) plus any extra DNS name or IP address.
"""

from __future__ import annotations

import datetime
import ipaddress

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

SERVICE = "hamiadmin-webhook"
NAMESPACE = "hamiadmin"


def service_hosts(
    service: str = SERVICE, namespace: str = NAMESPACE, domain: str = "cluster.local"
) -> list[str]:
    """The names the API server may use to reach a Service."""
    return [
        service,
        f"{service}.{namespace}",
        f"{service}.{namespace}.svc",
        f"{service}.{namespace}.svc.{domain}",
    ]


def self_signed(
    hosts: list[str], days: int = 365, organization: str = "hamiadmin", now: datetime.datetime | None = None
) -> tuple[bytes, bytes]:
    """(certificate PEM, private key PEM) valid for `hosts` (DNS names or IP addresses) for `days`."""
    if not hosts:
        raise ValueError("at least one host name is needed")
    if days < 1:
        raise ValueError("days must be at least 1")
    key = ec.generate_private_key(ec.SECP256R1())
    now = now or datetime.datetime.now(datetime.UTC)
    subject = x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, organization),
            x509.NameAttribute(NameOID.COMMON_NAME, hosts[0][:64]),
        ]
    )
    names: list[x509.GeneralName] = []
    for host in dict.fromkeys(hosts):
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            names.append(x509.DNSName(host))
    certificate = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=days))
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                key_cert_sign=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                crl_sign=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    key_pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    return certificate.public_bytes(serialization.Encoding.PEM), key_pem
