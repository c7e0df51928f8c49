"""The serving certificate: the self-signed pair (as the kubelet makes it) and the
kubelet-serving CSR flow (serverTLSBootstrap) against the fake apiserver."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import datetime as dt
import ipaddress
import ssl
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from nodeagent.apiserver import CSRS
from nodeagent.certificate import isolated
from nodeagent.clock import FrozenClock
from nodeagent.server import tls
from nodeagent.server.servingcert import (
    CURRENT,
    ServingCertificate,
    node_addresses,
    serving_csr_object,
    split_pem,
)
from nodeagent.testing.fake_apiserver import Call, FakeApiServer, LoopClock

NOW = dt.datetime(2026, 11, 25, 4, 0, tzinfo=dt.UTC)


def test_self_signed_pair_as_the_kubelet() -> None:
    cert_pem, _ = tls.self_signed_pair("node-a", ["10.0.0.5", "0.0.0.0"], now=NOW)
    cert = x509.load_pem_x509_certificate(cert_pem)
    cn = cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value
    assert cn == f"node-a@{int(NOW.timestamp())}"
    sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert sans.get_values_for_type(x509.DNSName) == ["node-a", "localhost"]
    assert [str(ip) for ip in sans.get_values_for_type(x509.IPAddress)] == [
        "10.0.0.5",
        "127.0.0.1",
        "::1",
    ]
    eku = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert list(eku) == [ExtendedKeyUsageOID.SERVER_AUTH]
    assert cert.not_valid_after_utc - cert.not_valid_before_utc > dt.timedelta(days=364)


def test_self_signed_pair_is_kept_across_restarts(tmp_path: Path) -> None:
    pki = tmp_path / "pki"
    cert, key = tls.ensure_self_signed(pki, "node-a", [], now=NOW)
    first = cert.read_bytes()
    assert (cert.name, key.name) == ("kubelet.crt", "kubelet.key")
    assert key.stat().st_mode & 0o777 == 0o600
    assert pki.stat().st_mode & 0o777 == 0o700
    tls.ensure_self_signed(pki, "node-a", [], now=NOW + dt.timedelta(days=1))
    assert cert.read_bytes() == first
    context = tls.server_context(cert, key)
    assert context.verify_mode == ssl.CERT_NONE


def test_server_context_asks_for_client_certificates_with_a_ca(tmp_path: Path) -> None:
    cert, key = tls.ensure_self_signed(tmp_path, "node-a", [], now=NOW)
    context = tls.server_context(cert, key, client_ca_file=str(cert))
    assert context.verify_mode == ssl.CERT_OPTIONAL


def test_node_addresses() -> None:
    node = {
        "status": {
            "addresses": [
                {"type": "InternalIP", "address": "10.0.0.5"},
                {"type": "Hostname", "address": "node-a"},
                {"type": "InternalIP", "address": "fd00::5"},
                {"type": "ExternalDNS", "address": "node-a.example.com"},
            ]
        }
    }
    assert node_addresses(node) == (["node-a", "node-a.example.com"], ["10.0.0.5", "fd00::5"])
    assert node_addresses(None) == ([], [])


def test_serving_csr_as_the_kubelet() -> None:
    key = ec.generate_private_key(ec.SECP256R1())
    key_pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    obj = serving_csr_object(key_pem, "node-a", ["node-a"], ["10.0.0.5"])
    assert obj["metadata"] == {"generateName": "csr-"}
    assert obj["spec"]["signerName"] == "kubernetes.io/kubelet-serving"
    assert obj["spec"]["usages"] == ["digital signature", "server auth"]
    request = x509.load_pem_x509_csr(base64.b64decode(obj["spec"]["request"]))
    assert request.subject.rfc4514_string() == "CN=system:node:node-a,O=system:nodes"
    sans = request.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert sans.get_values_for_type(x509.DNSName) == ["node-a"]
    assert sans.get_values_for_type(x509.IPAddress) == [ipaddress.ip_address("10.0.0.5")]


def _signer() -> tuple[ec.EllipticCurvePrivateKey, x509.Name]:
    return ec.generate_private_key(ec.SECP256R1()), x509.Name(
        [x509.NameAttribute(NameOID.COMMON_NAME, "kubernetes")]
    )


def sign(request_b64: str, *, days: float = 365, start: dt.datetime = NOW) -> str:
    ca_key, ca_name = _signer()
    request = x509.load_pem_x509_csr(base64.b64decode(request_b64))
    cert = (
        x509.CertificateBuilder()
        .subject_name(request.subject)
        .issuer_name(ca_name)
        .public_key(request.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start - dt.timedelta(minutes=5))
        .not_valid_after(start + dt.timedelta(days=days))
        .sign(ca_key, hashes.SHA256())
    )
    return base64.b64encode(cert.public_bytes(serialization.Encoding.PEM)).decode()


@pytest.mark.looptime
async def test_obtain_waits_for_addresses_and_approval(tmp_path: Path) -> None:
    api = FakeApiServer()
    created: dict[str, Any] = {}

    def create(call: Call) -> dict[str, Any]:
        created.update(call.body)
        created["metadata"] = {"name": "csr-abcde"}
        return created

    api.react("create", "certificatesigningrequests", create)
    answers = iter([{}, {}, None])

    def get(call: Call) -> dict[str, Any]:
        status = next(answers, None)
        if status is None:
            status = {"certificate": sign(created["spec"]["request"])}
        return {**created, "status": status}

    api.react("get", "certificatesigningrequests", get, times=None)
    addresses: list[tuple[list[str], list[str]]] = [([], []), (["node-a"], ["10.0.0.5"])]
    serving = ServingCertificate(
        api=api,
        clock=FrozenClock(NOW),
        node_name="node-a",
        pki_dir=tmp_path / "pki",
        addresses=lambda: addresses.pop(0) if len(addresses) > 1 else addresses[0],
        isolate=isolated.in_process,
    )
    path = await asyncio.wait_for(serving.obtain(), 60)
    assert path == tmp_path / "pki" / CURRENT
    assert path.stat().st_mode & 0o777 == 0o600
    cert, key = split_pem(path.read_bytes())
    assert b"CERTIFICATE" in cert and b"PRIVATE KEY" in key
    assert serving.current() == cert
    assert len(api.calls_to("create", "certificatesigningrequests")) == 1
    context = tls.server_context(path, path)  # loads as one file, as ssl expects
    assert context is not None
    # A restart reuses the stored pair: no new CSR.
    again = ServingCertificate(
        api=api,
        clock=FrozenClock(NOW),
        node_name="node-a",
        pki_dir=tmp_path / "pki",
        addresses=lambda: (["node-a"], ["10.0.0.5"]),
    )
    assert await again.obtain() == path
    assert len(api.calls_to("create", "certificatesigningrequests")) == 1
    assert CSRS.plural == "certificatesigningrequests"


@pytest.mark.looptime
async def test_rotation_before_expiry_reloads_the_new_pair(tmp_path: Path) -> None:
    api = FakeApiServer()
    requests: dict[str, dict[str, Any]] = {}

    def create(call: Call) -> dict[str, Any]:
        name = f"csr-{len(requests)}"
        requests[name] = {**call.body, "metadata": {"name": name}}
        return requests[name]

    clock = LoopClock(NOW)

    def get(call: Call) -> dict[str, Any]:
        body = requests[str(call.name)]
        cert = sign(body["spec"]["request"], days=1, start=clock.now())
        return {**body, "status": {"certificate": cert}}

    api.react("create", "certificatesigningrequests", create, times=None)
    api.react("get", "certificatesigningrequests", get, times=None)
    serving = ServingCertificate(
        api=api,
        clock=clock,
        node_name="node-a",
        pki_dir=tmp_path,
        addresses=lambda: (["node-a"], ["10.0.0.5"]),
        isolate=isolated.in_process,
    )
    path = await serving.obtain()
    first = path.read_bytes()
    loop = asyncio.get_running_loop()
    rotated: list[float] = []
    task = asyncio.create_task(serving.rotate_forever(lambda p: rotated.append(loop.time())))
    await asyncio.sleep(86_400 * 0.8 + 60)
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    assert len(rotated) == 1
    assert 86_400 * 0.7 - 300 <= rotated[0] <= 86_400 * 0.8 + 10  # 70-80% of the lifetime
    assert path.read_bytes() != first
    assert len(requests) == 2
