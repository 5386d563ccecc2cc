"""The local cluster's own CA and the certificates signed by it (nothing reused from the machine).

One CA signs the API server's serving certificate, the admin client certificate every local
component and user presents (group system:masters), and the serving certificate of the operators'
webhooks on 127.0.0.1; a separate key signs service-account tokens.
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

VALID_DAYS = 30


FRONT_PROXY_CLIENT = "front-proxy-client"


@dataclass(frozen=True)
class Pki:
    """Paths of the PEM files `write_pki` made."""

    dir: Path

    @property
    def ca(self) -> Path:
        return self.dir / "ca.crt"

    @property
    def ca_key(self) -> Path:
        return self.dir / "ca.key"

    def crt(self, name: str) -> Path:
        return self.dir / f"{name}.crt"

    def key(self, name: str) -> Path:
        return self.dir / f"{name}.key"

    @property
    def sa_key(self) -> Path:
        return self.dir / "sa.key"

    @property
    def sa_pub(self) -> Path:
        return self.dir / "sa.pub"


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def _name(common: str, org: str | None = None) -> x509.Name:
    attrs = [x509.NameAttribute(NameOID.COMMON_NAME, common)]
    if org:
        attrs.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, org))
    return x509.Name(attrs)


def _builder(subject: x509.Name, issuer: x509.Name, public_key: ec.EllipticCurvePublicKey) -> x509.CertificateBuilder:
    now = datetime.datetime.now(datetime.UTC)
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=VALID_DAYS))
    )


def _write(path: Path, data: bytes, private: bool = False) -> None:
    path.write_bytes(data)
    if private:
        path.chmod(0o600)


def write_pki(directory: Path, serving_names: list[str], serving_ips: list[str], kubelets: tuple[str, ...] = ()) -> Pki:
    """A fresh CA plus: `apiserver` (serving), `admin` (client, system:masters), `webhook` (serving
    on 127.0.0.1), the service-account signing key pair, and a client certificate per kubelet
    (`kubelet-<node>`, user system:node:<node>; group system:masters, since the local API server
    authorizes by RBAC alone, without the Node authorizer)."""
    directory.mkdir(parents=True, exist_ok=True)
    pki = Pki(directory)
    ca_key = _key()
    ca_name = _name("grpo-infra-local-ca")
    ca_cert = (
        _builder(ca_name, ca_name, ca_key.public_key())
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(True, False, False, False, False, True, True, False, False),
            critical=True,
        )
        .sign(ca_key, hashes.SHA256())
    )
    _write(pki.ca, ca_cert.public_bytes(serialization.Encoding.PEM))
    _write(pki.ca_key, _pem_key(ca_key), private=True)

    def issue(name: str, subject: x509.Name, usage: x509.ObjectIdentifier, dns: list[str], ips: list[str]) -> None:
        key = _key()
        builder = _builder(subject, ca_name, key.public_key()).add_extension(
            x509.ExtendedKeyUsage([usage]), critical=False
        )
        sans: list[x509.GeneralName] = [x509.DNSName(d) for d in dns]
        sans += [x509.IPAddress(ipaddress.ip_address(i)) for i in ips]
        if sans:
            builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
        cert = builder.sign(ca_key, hashes.SHA256())
        _write(pki.crt(name), cert.public_bytes(serialization.Encoding.PEM))
        _write(pki.key(name), _pem_key(key), private=True)

    issue("apiserver", _name("kube-apiserver"), ExtendedKeyUsageOID.SERVER_AUTH, serving_names, serving_ips)
    issue("admin", _name("grpo-infra-admin", "system:masters"), ExtendedKeyUsageOID.CLIENT_AUTH, [], [])
    issue("webhook", _name("grpo-infra-webhooks"), ExtendedKeyUsageOID.SERVER_AUTH, ["localhost"], ["127.0.0.1"])
    # The aggregator's client: the API server proxies to an aggregated API (Kueue's visibility server, run as
    # a pod from its chart) with this certificate, and the extension server trusts the user it names.
    issue(FRONT_PROXY_CLIENT, _name(FRONT_PROXY_CLIENT), ExtendedKeyUsageOID.CLIENT_AUTH, [], [])
    for node in kubelets:
        issue(
            f"kubelet-{node}", _name(f"system:node:{node}", "system:masters"), ExtendedKeyUsageOID.CLIENT_AUTH, [], []
        )
    sa = _key()
    _write(pki.sa_key, _pem_key(sa), private=True)
    _write(
        pki.sa_pub,
        sa.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo),
    )
    return pki
