"""Keys, CSRs and certificate facts for the kubelet client certificate (pure functions).

The CSR is what the kubelet sends for ``kubernetes.io/kube-apiserver-client-kubelet``: an ECDSA
P-256 key, subject ``O=system:nodes, CN=system:node:<name>``, no SANs, usages
``digital signature`` + ``client auth`` (the set the csrapproving controller accepts). The CSR
object's name is a digest of the public key, subject and usages, so a restart while waiting
finds the same request again instead of creating another.

Reading a certificate (:func:`cert_info`, :func:`key_matches`) needs only the standard library
(:mod:`nodeagent.certificate.der`); making a key or a CSR imports ``cryptography`` when called,
which the agent does in a child process (:mod:`nodeagent.certificate.isolated`) so that its
own RSS never carries it.
"""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from nodeagent.certificate import der

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric import ec

SIGNER: Final = "kubernetes.io/kube-apiserver-client-kubelet"
USAGES: Final = ("digital signature", "client auth")
NODES_GROUP: Final = "system:nodes"


def common_name(node_name: str) -> str:
    return f"system:node:{node_name}"


def new_private_key_pem() -> bytes:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    key = ec.generate_private_key(ec.SECP256R1())
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def _load_key(key_pem: bytes) -> ec.EllipticCurvePrivateKey:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    key = serialization.load_pem_private_key(key_pem, password=None)
    if not isinstance(key, ec.EllipticCurvePrivateKey):
        raise ValueError("the node client key must be an ECDSA key")
    return key


def csr_pem(key_pem: bytes, node_name: str) -> bytes:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.x509.oid import NameOID

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
    from cryptography.hazmat.primitives import serialization

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
    """Subject and validity of the first certificate of ``cert_pem`` (ValueError if it is
    not one)."""
    not_before, not_after = der.validity(cert_pem)
    return CertInfo(subject=der.subject(cert_pem), not_before=not_before, not_after=not_after)


def key_matches(cert_pem: bytes, key_pem: bytes) -> bool:
    """Whether the certificate is for this EC key (ValueError if either cannot be read, or the
    key is not EC or does not carry its public point, as none of the keys we make)."""
    public = der.ec_public_key(key_pem)
    if public is None:
        raise ValueError("the key is not an EC private key with its public key")
    return der.cert_public_key(cert_pem) == public


ROTATE_AT_MIN: Final = 0.7
ROTATE_AT_MAX: Final = 0.8


def rotation_deadline(info: CertInfo, rand: float) -> dt.datetime:
    """When to rotate: a jittered 70-80% of the lifetime, so always before 80%."""
    fraction = ROTATE_AT_MIN + (ROTATE_AT_MAX - ROTATE_AT_MIN) * rand
    return info.not_before + info.lifetime * fraction
