"""Keys, CSRs and certificate facts for the kubelet client certificate (pure functions).

The CSR is what the kubelet sends for ``kubernetes.io/kube-apiserver-client-kubelet``: an ECDSA
P-256 key, subject ``O=system:nodes, CN=system:node:<name>``, no SANs, usages
``digital signature`` + ``client auth`` (the set the csrapproving controller accepts). The CSR
object's name is a digest of the public key, subject and usages, so a restart while waiting
finds the same request again instead of creating another.
"""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
from dataclasses import dataclass
from typing import Final

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

SIGNER: Final = "kubernetes.io/kube-apiserver-client-kubelet"
USAGES: Final = ("digital signature", "client auth")
NODES_GROUP: Final = "system:nodes"


def common_name(node_name: str) -> str:
    return f"system:node:{node_name}"


def new_private_key_pem() -> bytes:
    key = ec.generate_private_key(ec.SECP256R1())
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def _load_key(key_pem: bytes) -> ec.EllipticCurvePrivateKey:
    key = serialization.load_pem_private_key(key_pem, password=None)
    if not isinstance(key, ec.EllipticCurvePrivateKey):
        raise ValueError("the node client key must be an ECDSA key")
    return key


def csr_pem(key_pem: bytes, node_name: str) -> bytes:
    subject = x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, NODES_GROUP),
            x509.NameAttribute(NameOID.COMMON_NAME, common_name(node_name)),
        ]
    )
    csr = (
        x509.CertificateSigningRequestBuilder()
        .subject_name(subject)
        .sign(_load_key(key_pem), hashes.SHA256())
    )
    return csr.public_bytes(serialization.Encoding.PEM)


def csr_name(key_pem: bytes, node_name: str) -> str:
    """``node-csr-<digest>`` of public key, subject and usages (stable across restarts)."""
    public = (
        _load_key(key_pem)
        .public_key()
        .public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    )
    digest = hashlib.sha512()
    for part in (
        public,
        NODES_GROUP.encode(),
        common_name(node_name).encode(),
        *map(str.encode, USAGES),
    ):
        digest.update(len(part).to_bytes(4, "big") + part)
    return "node-csr-" + base64.urlsafe_b64encode(digest.digest()).decode().rstrip("=")


def csr_object(key_pem: bytes, node_name: str) -> dict[str, object]:
    return {
        "metadata": {"name": csr_name(key_pem, node_name)},
        "spec": {
            "request": base64.b64encode(csr_pem(key_pem, node_name)).decode("ascii"),
            "signerName": SIGNER,
            "usages": list(USAGES),
        },
    }


@dataclass(frozen=True)
class CertInfo:
    subject: str
    not_before: dt.datetime
    not_after: dt.datetime

    @property
    def lifetime(self) -> dt.timedelta:
        return self.not_after - self.not_before

    def valid_at(self, now: dt.datetime) -> bool:
        return self.not_before <= now < self.not_after


def cert_info(cert_pem: bytes) -> CertInfo:
    cert = x509.load_pem_x509_certificate(cert_pem)
    return CertInfo(
        subject=cert.subject.rfc4514_string(),
        not_before=cert.not_valid_before_utc,
        not_after=cert.not_valid_after_utc,
    )


def key_matches(cert_pem: bytes, key_pem: bytes) -> bool:
    cert_key = x509.load_pem_x509_certificate(cert_pem).public_key()
    fmt = (serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    return cert_key.public_bytes(*fmt) == _load_key(key_pem).public_key().public_bytes(*fmt)


ROTATE_AT_MIN: Final = 0.7
ROTATE_AT_MAX: Final = 0.8


def rotation_deadline(info: CertInfo, rand: float) -> dt.datetime:
    """When to rotate: a jittered 70-80% of the lifetime, so always before 80%."""
    fraction = ROTATE_AT_MIN + (ROTATE_AT_MAX - ROTATE_AT_MIN) * rand
    return info.not_before + info.lifetime * fraction
