"""The serving certificate of the kubelet API and its TLS context.

Without ``tlsCertFile``/``tlsPrivateKeyFile`` (and without ``serverTLSBootstrap``) the kubelet
serves a self-signed pair it keeps in ``<rootDir>/pki/kubelet.crt`` and ``kubelet.key``: CN
``<hostname>@<unix time>``, valid one year, SANs the hostname (and ``localhost``) plus the
node's IPs. An existing pair is reused as is, as the kubelet does.

The context asks for a client certificate (``CERT_OPTIONAL``) when ``clientCAFile`` is set:
one signed by that CA authenticates the request; none at all falls through to bearer tokens.
``load_cert_chain`` may be called again on a live context (rotation): new handshakes use the
new pair, open connections keep theirs.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import ssl
from collections.abc import Iterable
from pathlib import Path
from typing import Final

from nodeagent.certificate import isolated
from nodeagent.certificate.store import ensure_private_dir, write_private

SELF_SIGNED_VALIDITY: Final = dt.timedelta(days=365)
CERT_NAME: Final = "kubelet.crt"
KEY_NAME: Final = "kubelet.key"


def self_signed_pair(hostname: str, ips: Iterable[str], *, now: dt.datetime) -> tuple[bytes, bytes]:
    """(cert PEM, key PEM): a self-signed serving certificate for ``hostname`` and ``ips``
    (imports ``cryptography``: the agent calls it in a child process)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name(
        [x509.NameAttribute(NameOID.COMMON_NAME, f"{hostname}@{int(now.timestamp())}")]
    )
    dns = [hostname] if hostname != "localhost" else []
    sans: list[x509.GeneralName] = [x509.DNSName(d) for d in (*dns, "localhost")]
    seen: set[str] = set()
    for ip in ips:
        addr = ipaddress.ip_address(ip)
        if str(addr) not in seen and not addr.is_unspecified:
            seen.add(str(addr))
            sans.append(x509.IPAddress(addr))
    for loopback in ("127.0.0.1", "::1"):
        if loopback not in seen:
            sans.append(x509.IPAddress(ipaddress.ip_address(loopback)))
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=1))
        .not_valid_after(now + SELF_SIGNED_VALIDITY)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                key_encipherment=True,
                key_cert_sign=True,
                content_commitment=False,
                data_encipherment=False,
                key_agreement=False,
                crl_sign=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.SubjectAlternativeName(sans), critical=False)
        .sign(key, hashes.SHA256())
    )
    key_pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.TraditionalOpenSSL,
        serialization.NoEncryption(),
    )
    return cert.public_bytes(serialization.Encoding.PEM), key_pem


def _self_signed_pair(hostname: str, ips: list[str], now: dt.datetime) -> tuple[bytes, bytes]:
    return self_signed_pair(hostname, ips, now=now)


def ensure_self_signed(
    pki_dir: Path, hostname: str, ips: Iterable[str], *, now: dt.datetime
) -> tuple[Path, Path]:
    """The self-signed pair's paths, generated on first use (kept across restarts), in a
    child process (blocking: the server calls this in a thread)."""
    cert_path, key_path = pki_dir / CERT_NAME, pki_dir / KEY_NAME
    if cert_path.is_file() and key_path.is_file():
        return cert_path, key_path
    ensure_private_dir(pki_dir)
    cert_pem, key_pem = isolated.run(_self_signed_pair, hostname, list(ips), now)
    write_private(key_path, key_pem)
    cert_path.write_bytes(cert_pem)
    return cert_path, key_path


def server_context(cert_file: Path, key_file: Path, *, client_ca_file: str = "") -> ssl.SSLContext:
    """TLS 1.2+ server context; asks for (but does not require) a client certificate."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(cert_file, key_file)
    if client_ca_file:
        context.load_verify_locations(cafile=client_ca_file)
        context.verify_mode = ssl.CERT_OPTIONAL
    return context
