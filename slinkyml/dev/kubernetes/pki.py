"""Certificates, keys and kubeconfigs for the local Kubernetes control plane (``slinkyml dev kube``).

Made with ``cryptography`` (a well-kept library with typed builders) rather than ``openssl`` runs:
no config files to template, no output to parse, and every private key goes straight to a 0600
file through ``slinkyml.secretfile`` (atomic, private from its first byte). ECDSA P-256 throughout: keys generate in microseconds (RSA 2048 takes
~0.1 s each) and kube-apiserver accepts them for serving, client and service-account tokens (ES256).
"""

from __future__ import annotations

import base64
import datetime
import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path

import yaml
from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from slinkyml.secretfile import write_secret

#: long enough for a dev machine; `dev kube up` renews any certificate with less than RENEW_BEFORE left
VALIDITY = datetime.timedelta(days=365)
RENEW_BEFORE = datetime.timedelta(days=30)


@dataclass(frozen=True)
class Identity:
    """A client certificate's subject: the user (CN) and groups (O) the API server authenticates."""

    file: str
    user: str
    groups: tuple[str, ...] = ()


def _new_key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def _load_key(path: Path) -> ec.EllipticCurvePrivateKey:
    key = serialization.load_pem_private_key(path.read_bytes(), password=None)
    if not isinstance(key, ec.EllipticCurvePrivateKey):
        raise ValueError(f"{path}: not an ECDSA key")
    return key


def _fresh(cert_file: Path, issuer: x509.Certificate | None = None) -> bool:
    """The certificate exists, stays valid for RENEW_BEFORE more and (given ``issuer``) was signed by
    that CA: a certificate made before the CA was renewed is not fresh, whoever asks for it."""
    try:
        cert = x509.load_pem_x509_certificate(cert_file.read_bytes())
        if issuer is not None:
            cert.verify_directly_issued_by(issuer)
    except (OSError, ValueError, TypeError, InvalidSignature):
        return False
    return cert.not_valid_after_utc - datetime.datetime.now(datetime.UTC) > RENEW_BEFORE


class Pki:
    """The files under one folder: a CA, the certificates it signs, the service-account key pair."""

    def __init__(self, folder: Path):
        self.folder = folder

    def path(self, name: str) -> Path:
        return self.folder / name

    @property
    def ca_cert(self) -> Path:
        return self.path("ca.crt")

    def ensure_ca(self) -> bool:
        """Create the CA when missing or about to expire; True when it was (re)made, which
        invalidates every certificate it signed."""
        self.folder.mkdir(parents=True, exist_ok=True)
        os.chmod(self.folder, 0o700)
        if _fresh(self.ca_cert) and self.path("ca.key").is_file():
            return False
        key = _new_key()
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "slinkyml-dev-kube-ca")])
        now = datetime.datetime.now(datetime.UTC)
        cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
                .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
                .not_valid_after(now + VALIDITY)
                .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
                .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                             content_commitment=False, key_encipherment=False,
                                             data_encipherment=False, key_agreement=False,
                                             encipher_only=False, decipher_only=False), critical=True)
                .sign(key, hashes.SHA256()))
        write_secret(self.path("ca.key"), _key_pem(key), force=True)
        write_secret(self.ca_cert, cert.public_bytes(serialization.Encoding.PEM), mode=0o644, force=True)
        return True

    def ensure_cert(self, stem: str, common_name: str, *, organizations: tuple[str, ...] = (),
                    hosts: tuple[str, ...] = (), server: bool = False, force: bool = False) -> None:
        """``stem.crt``/``stem.key`` signed by the CA: a serving certificate for ``hosts`` (IPs or DNS
        names) when ``server``, else a client certificate for user ``common_name`` in ``organizations``."""
        crt, key_file = self.path(f"{stem}.crt"), self.path(f"{stem}.key")
        ca = x509.load_pem_x509_certificate(self.ca_cert.read_bytes())
        if not force and _fresh(crt, ca) and key_file.is_file():
            return
        ca_key = _load_key(self.path("ca.key"))
        key = _new_key()
        subject = x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, o) for o in organizations]
                            + [x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
        now = datetime.datetime.now(datetime.UTC)
        builder = (x509.CertificateBuilder().subject_name(subject).issuer_name(ca.subject)
                   .public_key(key.public_key()).serial_number(x509.random_serial_number())
                   .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + VALIDITY)
                   .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
                   .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH if server
                                                         else ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False))
        if hosts:
            names: list[x509.GeneralName] = []
            for host in hosts:
                try:
                    names.append(x509.IPAddress(ipaddress.ip_address(host)))
                except ValueError:
                    names.append(x509.DNSName(host))
            builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
        cert = builder.sign(ca_key, hashes.SHA256())
        write_secret(key_file, _key_pem(key), force=True)
        write_secret(crt, cert.public_bytes(serialization.Encoding.PEM), mode=0o644, force=True)

    def ensure_service_account_keys(self) -> None:
        """``sa.key`` (kube-apiserver signs service-account tokens with it, kube-controller-manager
        too) and ``sa.pub`` (kube-apiserver verifies them)."""
        if self.path("sa.key").is_file() and self.path("sa.pub").is_file():
            return
        key = _new_key()
        write_secret(self.path("sa.key"), _key_pem(key), force=True)
        pub = key.public_key().public_bytes(serialization.Encoding.PEM,
                                            serialization.PublicFormat.SubjectPublicKeyInfo)
        write_secret(self.path("sa.pub"), pub, mode=0o644, force=True)

    def kubeconfig(self, path: Path, server: str, stem: str, cluster_name: str, *,
                   tls_server_name: str | None = None) -> None:
        """A kubeconfig for the client certificate ``stem``, with everything embedded (one file to
        hand out, as ``kubectl config view --flatten`` would write it); 0600, atomically.
        ``tls_server_name``: the name to check the server's certificate for, where ``server``'s address
        is not among its names."""
        b64 = lambda p: base64.b64encode(p.read_bytes()).decode()  # noqa: E731
        cluster = {"server": server, "certificate-authority-data": b64(self.ca_cert),
                   **({"tls-server-name": tls_server_name} if tls_server_name else {})}
        config = {
            "apiVersion": "v1", "kind": "Config", "preferences": {}, "current-context": cluster_name,
            "clusters": [{"name": cluster_name, "cluster": cluster}],
            "users": [{"name": stem, "user": {"client-certificate-data": b64(self.path(f"{stem}.crt")),
                                              "client-key-data": b64(self.path(f"{stem}.key"))}}],
            "contexts": [{"name": cluster_name, "context": {"cluster": cluster_name, "user": stem}}],
        }
        text = yaml.safe_dump(config, sort_keys=False).encode()
        if not (path.is_file() and path.read_bytes() == text):
            write_secret(path, text, force=True)

    def ca_bundle(self) -> str:
        """The CA certificate, base64, as a webhook configuration's ``caBundle`` wants it."""
        return base64.b64encode(self.ca_cert.read_bytes()).decode()
