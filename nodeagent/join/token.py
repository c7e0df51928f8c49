"""What the operator hands to ``nodeagent join``: a bootstrap token and CA public-key pins.

Both are checked before any network traffic, with kubeadm's rules:

- a bootstrap token is ``[a-z0-9]{6}.[a-z0-9]{16}`` (``k8s.io/cluster-bootstrap``'s
  ``BootstrapTokenPattern``): the id names the ``kube-system/bootstrap-token-<id>`` Secret and
  the ``jws-kubeconfig-<id>`` signature; the secret keys the signature and authenticates;
- a pin is ``sha256:<64 hex digits>`` (kubeadm's ``pubkeypin``): the SHA-256 of a CA
  certificate's DER ``SubjectPublicKeyInfo``, what
  ``openssl x509 -pubkey | openssl pkey -pubin -outform der | sha256sum`` prints.

The token's secret is never part of an error message or a ``repr``.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Final

from nodeagent.errors import AgentError

TOKEN_PATTERN: Final = re.compile(r"([a-z0-9]{6})\.([a-z0-9]{16})", re.ASCII)
TOKEN_FORM: Final = "[a-z0-9]{6}.[a-z0-9]{16}"
PIN_FORMAT: Final = "sha256"


class JoinError(AgentError):
    """``nodeagent join`` refuses: the message says what did not match and what to do."""


@dataclass(frozen=True)
class BootstrapToken:
    token_id: str
    secret: str = field(repr=False)

    def __str__(self) -> str:  # what a message may show: the id only
        return f"{self.token_id}.<secret>"

    @property
    def value(self) -> str:
        """``<id>.<secret>``: only for the bootstrap kubeconfig, never for a message."""
        return f"{self.token_id}.{self.secret}"


def parse_token(text: str, *, flag: str = "--token") -> BootstrapToken:
    match = TOKEN_PATTERN.fullmatch(text.strip())
    if match is None:
        raise JoinError(f"{flag}: the bootstrap token is not of the form {TOKEN_FORM!r}")
    return BootstrapToken(token_id=match.group(1), secret=match.group(2))


def parse_pins(
    values: Iterable[str], *, flag: str = "--discovery-token-ca-cert-hash"
) -> frozenset[str]:
    """The lower-case hex digests of ``sha256:<hex>`` pins (kubeadm's ``pubkeypin.Set.Allow``)."""
    pins: set[str] = set()
    for text in values:
        fmt, sep, value = text.strip().partition(":")
        if not sep or ":" in value:
            raise JoinError(
                f'{flag} {text!r}: invalid hash, expected "format:hex-value"; '
                f"known format(s) are: {PIN_FORMAT}"
            )
        if fmt.lower() != PIN_FORMAT:
            raise JoinError(
                f"{flag} {text!r}: unknown hash format {fmt!r}; known format(s) are: {PIN_FORMAT}"
            )
        if len(value) // 2 != hashlib.sha256().digest_size:
            raise JoinError(
                f"{flag} {text!r}: expected a 32 byte SHA-256 hash, found {len(value) // 2} bytes"
            )
        try:
            bytes.fromhex(value)
        except ValueError:
            raise JoinError(f"{flag} {text!r}: could not decode SHA-256 from hex") from None
        pins.add(value.lower())
    return frozenset(pins)


def spki_pins(bundle_pem: bytes) -> list[str]:
    """``sha256:<hex>`` of each PEM certificate's DER SubjectPublicKeyInfo (kubeadm's ``Hash``).

    kubeadm hashes the certificate's own SPKI bytes; ``cryptography`` re-encodes the public key,
    which gives the same bytes since DER is canonical (checked against Go's hashes for an EC and
    an RSA CA in the unit tests). Raises ``ValueError`` when the bundle holds no certificate.
    """
    from cryptography import x509
    from cryptography.hazmat.primitives import serialization

    certs = x509.load_pem_x509_certificates(bundle_pem)
    return [
        f"{PIN_FORMAT}:"
        + hashlib.sha256(
            cert.public_key().public_bytes(
                serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
            )
        ).hexdigest()
        for cert in certs
    ]
