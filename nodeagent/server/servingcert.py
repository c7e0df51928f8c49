"""``serverTLSBootstrap``: the kubelet API's serving certificate from the cluster's
``kubernetes.io/kubelet-serving`` signer, used once approved, rotated before expiry.

The CSR is the kubelet's: an ECDSA P-256 key, subject ``O=system:nodes,
CN=system:node:<nodeName>``, SANs the node's DNS names and IPs as its status reports them
(``Hostname``/``*DNS`` and ``*IP`` addresses), usages ``digital signature`` + ``server auth``,
``generateName: csr-``. Nothing in the cluster approves these by default (``make up``
approves its node's). The pair is kept, cert then key, in ``<rootDir>/pki/
kubelet-server-current.pem`` (0600) and reused while valid; rotation starts at a jittered
70-80% of the lifetime, and the new pair is loaded into the live TLS context.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import ipaddress
import random
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Final

from nodeagent.apiserver import CSRS, Api, ApiError, Backoff, Obj
from nodeagent.certificate import csr, isolated
from nodeagent.certificate.store import ensure_private_dir, write_private
from nodeagent.clock import Clock
from nodeagent.errors import AgentError
from nodeagent.log import Logger, get_logger

SIGNER: Final = "kubernetes.io/kubelet-serving"
USAGES: Final = ("digital signature", "server auth")
CURRENT: Final = "kubelet-server-current.pem"
POLL: Final = 2.0
MAX_SLEEP: Final = 600.0
MIN_ROTATION_GAP: Final = 60.0

Addresses = Callable[[], tuple[Sequence[str], Sequence[str]]]
"""(DNS names, IPs) of the node, as its status reports them; empty while unknown."""


def node_addresses(node: Obj | None) -> tuple[list[str], list[str]]:
    """(DNS names, IPs) from a Node's ``status.addresses``."""
    dns: list[str] = []
    ips: list[str] = []
    for addr in ((node or {}).get("status") or {}).get("addresses") or []:
        kind, value = addr.get("type", ""), addr.get("address", "")
        if not value:
            continue
        if kind in ("Hostname", "InternalDNS", "ExternalDNS") and value not in dns:
            dns.append(value)
        elif kind in ("InternalIP", "ExternalIP") and value not in ips:
            ips.append(value)
    return dns, ips


def serving_csr_pem(
    key_pem: bytes, node_name: str, dns: Sequence[str], ips: Sequence[str]
) -> bytes:
    """The CSR's PEM (imports ``cryptography``: the agent calls it in a child process)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = serialization.load_pem_private_key(key_pem, password=None)
    assert isinstance(key, ec.EllipticCurvePrivateKey)
    sans: list[x509.GeneralName] = [x509.DNSName(d) for d in dns]
    sans += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ips]
    builder = x509.CertificateSigningRequestBuilder().subject_name(
        x509.Name(
            [
                x509.NameAttribute(NameOID.ORGANIZATION_NAME, csr.NODES_GROUP),
                x509.NameAttribute(NameOID.COMMON_NAME, csr.common_name(node_name)),
            ]
        )
    )
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    return builder.sign(key, hashes.SHA256()).public_bytes(serialization.Encoding.PEM)


def serving_csr_object(
    key_pem: bytes, node_name: str, dns: Sequence[str], ips: Sequence[str]
) -> dict[str, Any]:
    request = serving_csr_pem(key_pem, node_name, dns, ips)
    return {
        "metadata": {"generateName": "csr-"},
        "spec": {
            "request": base64.b64encode(request).decode("ascii"),
            "signerName": SIGNER,
            "usages": list(USAGES),
        },
    }


def outcome(obj: Obj | None) -> bytes | str | None:
    """The issued certificate (PEM), a denial/failure text, or None while pending."""
    status = (obj or {}).get("status") or {}
    for cond in status.get("conditions") or []:
        if cond.get("type") in ("Denied", "Failed") and cond.get("status", "True") == "True":
            return f"{cond['type'].lower()}: {cond.get('reason', '')} {cond.get('message', '')}"
    encoded = status.get("certificate")
    if not encoded:
        return None
    try:
        return base64.b64decode(encoded, validate=True)
    except binascii.Error:
        return "the issued certificate is not valid base64"


def split_pem(data: bytes) -> tuple[bytes, bytes]:
    """(certificate PEM, key PEM) of a combined file."""
    marker = b"-----BEGIN"
    parts = [marker + p for p in data.split(marker) if p.strip()]
    certs = b"".join(p for p in parts if b"CERTIFICATE-----" in p.split(b"\n", 1)[0])
    keys = b"".join(p for p in parts if b"PRIVATE KEY-----" in p.split(b"\n", 1)[0])
    return certs, keys


class ServingCertificate:
    def __init__(
        self,
        *,
        api: Api,
        clock: Clock,
        node_name: str,
        pki_dir: Path,
        addresses: Addresses,
        log: Logger | None = None,
        isolate: isolated.Isolate = isolated.call,
    ) -> None:
        self._isolate = isolate
        self._api = api
        self._clock = clock
        self._node_name = node_name
        self._pki_dir = pki_dir
        self._addresses = addresses
        self._log = log or get_logger("server")

    @property
    def path(self) -> Path:
        return self._pki_dir / CURRENT

    def current(self) -> bytes | None:
        """The stored certificate PEM when it is valid now and matches its key."""
        try:
            cert, key = split_pem(self.path.read_bytes())
        except OSError:
            return None
        try:
            if not csr.key_matches(cert, key) or not csr.cert_info(cert).valid_at(
                self._clock.now()
            ):
                return None
        except ValueError:
            return None
        return cert

    async def obtain(self) -> Path:
        """A valid pair on disk: the stored one, else a newly issued one (retried with
        backoff until the CSR is approved and signed)."""
        if self.current() is not None:
            return self.path
        await self._request_with_backoff()
        return self.path

    async def rotate_forever(self, on_rotated: Callable[[Path], None]) -> None:
        while True:
            cert = self.current()
            if cert is not None:
                deadline = csr.rotation_deadline(csr.cert_info(cert), random.random())
                while (left := (deadline - self._clock.now()).total_seconds()) > 0:  # noqa: ASYNC110
                    await asyncio.sleep(min(left, MAX_SLEEP))
            await self._request_with_backoff()
            on_rotated(self.path)
            # A signer that issues certificates already due for rotation must not make us
            # ask again in a tight loop.
            await asyncio.sleep(MIN_ROTATION_GAP)

    async def _request_with_backoff(self) -> None:
        backoff = Backoff(initial=2.0, cap=300.0)
        while True:
            try:
                await self._request()
                return
            except (ApiError, ServingCertError, isolated.IsolatedError) as e:
                delay = backoff.next()
                self._log.error(
                    "Failed to get the serving certificate; will retry",
                    error=str(e),
                    retry_in_s=delay,
                )
                await asyncio.sleep(delay)

    async def _request(self) -> None:
        dns, ips = self._addresses()
        while not ips:
            await asyncio.sleep(POLL)  # the kubelet waits for the node's addresses too
            dns, ips = self._addresses()
        key = await self._isolate(csr.new_private_key_pem)
        body = await self._isolate(serving_csr_object, key, self._node_name, list(dns), list(ips))
        created = await self._api.create(CSRS, body)
        name = str((created.get("metadata") or {}).get("name", ""))
        self._log.info(
            "Created serving certificate signing request",
            csr=name,
            signer=SIGNER,
            dns=",".join(dns),
            ips=",".join(ips),
        )
        while (result := outcome(await self._api.get(CSRS, name))) is None:  # noqa: ASYNC110
            await asyncio.sleep(POLL)  # polled: one CSR, approved once
        if isinstance(result, str):
            raise ServingCertError(f"CSR {name}: {result}")
        if not csr.key_matches(result, key):
            raise ServingCertError(f"CSR {name}: the issued certificate does not match our key")
        ensure_private_dir(self._pki_dir)
        write_private(self.path, result + key)
        info = csr.cert_info(result)
        self._log.info("Serving certificate issued", csr=name, expires=info.not_after.isoformat())


class ServingCertError(AgentError):
    pass
