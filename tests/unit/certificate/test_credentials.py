"""TLS bootstrap and rotation of the node client certificate, against the fake apiserver."""

from __future__ import annotations

import asyncio
import base64
import datetime as dt
import os
import stat
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
from harness.pki import Authority, create_authority, load_key

from nodeagent.apiserver import CSRS, Endpoint, load_kubeconfig
from nodeagent.certificate import csr, isolated
from nodeagent.certificate.manager import CredentialSettings, CredentialsManager
from nodeagent.errors import ConfigError
from nodeagent.testing.fake_apiserver import FakeApiServer

pytestmark = pytest.mark.looptime

NODE = "node-a"
SERVER = "https://apiserver.test:6443"


@pytest.fixture
def ca(tmp_path: Path) -> Authority:
    return create_authority(
        directory=tmp_path, name="ca", common_name="kubernetes", validity=dt.timedelta(days=3650)
    )


@pytest.fixture
def settings(tmp_path: Path, ca: Authority) -> CredentialSettings:
    boot = tmp_path / "bootstrap-kubeconfig"
    boot.write_text(
        yaml.safe_dump(
            {
                "clusters": [
                    {
                        "name": "c",
                        "cluster": {
                            "server": SERVER,
                            "certificate-authority-data": base64.b64encode(
                                ca.pair.cert.read_bytes()
                            ).decode(),
                        },
                    }
                ],
                "users": [{"name": "u", "user": {"token": "abcdef.0123456789abcdef"}}],
                "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "x",
            }
        )
    )
    return CredentialSettings(
        node_name=NODE,
        kubeconfig=tmp_path / "etc/kubeconfig",
        bootstrap_kubeconfig=boot,
        pki_dir=tmp_path / "root/pki",
        rotate_certificates=True,
    )


def sign(ca: Authority, request_pem: bytes, *, not_before: dt.datetime, lifetime: float) -> bytes:
    req = x509.load_pem_x509_csr(request_pem)
    ca_cert = x509.load_pem_x509_certificate(ca.pair.cert.read_bytes())
    cert = (
        x509.CertificateBuilder()
        .subject_name(req.subject)
        .issuer_name(ca_cert.subject)
        .public_key(req.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(not_before)
        .not_valid_after(not_before + dt.timedelta(seconds=lifetime))
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
        .sign(load_key(ca.pair.key), hashes.SHA256())
    )
    return cert.public_bytes(serialization.Encoding.PEM)


class Approver:
    """The cluster side: approves (or denies) each new CSR and issues a certificate."""

    def __init__(self, server: FakeApiServer, ca: Authority, lifetime: float) -> None:
        self.server, self.ca, self.lifetime = server, ca, lifetime
        self.deny_next = 0
        self.handled: list[tuple[float, str, str]] = []

    async def run(self) -> None:
        while True:
            for obj in self.server.objects(CSRS):
                name = obj["metadata"]["name"]
                if "status" in obj:
                    continue
                self.server.modify(CSRS, name, self._decide)
                self.handled.append(
                    (
                        asyncio.get_running_loop().time(),
                        name,
                        self.server.stored(CSRS, name)["status"]["conditions"][0]["type"],
                    )
                )  # type: ignore[index]
            await asyncio.sleep(0.5)

    def _decide(self, obj: dict[str, Any]) -> None:
        if self.deny_next:
            self.deny_next -= 1
            obj["status"] = {
                "conditions": [
                    {
                        "type": "Denied",
                        "status": "True",
                        "reason": "NotOurNode",
                        "message": "go away",
                    }
                ]
            }
            return
        cert = sign(
            self.ca,
            base64.b64decode(obj["spec"]["request"]),
            not_before=self.server.clock.now(),
            lifetime=self.lifetime,
        )
        obj["status"] = {
            "conditions": [{"type": "Approved", "status": "True", "reason": "AutoApproved"}],
            "certificate": base64.b64encode(cert).decode(),
        }


@pytest.fixture
def server() -> FakeApiServer:
    return FakeApiServer()


@pytest.fixture
def approver(server: FakeApiServer, ca: Authority) -> Approver:
    return Approver(server, ca, lifetime=1000.0)


@pytest.fixture
async def start(
    server: FakeApiServer, settings: CredentialSettings, approver: Approver
) -> AsyncIterator[Callable[..., asyncio.Task[None]]]:
    # Tasks start inside the test, so their timers live in the test's virtual time.
    tasks: list[asyncio.Task[None]] = []
    booted: list[Endpoint] = []

    def bootstrap_client(ep: Endpoint) -> FakeApiServer:
        booted.append(ep)
        return server

    def starter(**kw: Any) -> asyncio.Task[None]:
        if not tasks:
            tasks.append(asyncio.create_task(approver.run()))
        kw.setdefault("settings", settings)
        kw.setdefault("isolate", isolated.in_process)
        m = CredentialsManager(
            api=server,
            clock=server.clock,
            bootstrap_client=bootstrap_client,
            rand=lambda: 0.5,
            **kw,
        )
        tasks.append(asyncio.create_task(m.run()))
        return tasks[-1]

    yield starter
    for t in tasks:
        t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


def mode(path: Path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


async def test_bootstrap_requests_a_kubelet_client_certificate_and_switches_to_it(
    server: FakeApiServer,
    settings: CredentialSettings,
    approver: Approver,
    start: Callable[..., asyncio.Task[None]],
) -> None:
    start()
    await asyncio.sleep(2)

    (request,) = server.objects(CSRS)
    assert request["spec"]["signerName"] == "kubernetes.io/kube-apiserver-client-kubelet"
    assert request["spec"]["usages"] == ["digital signature", "client auth"]
    parsed = x509.load_pem_x509_csr(base64.b64decode(request["spec"]["request"]))
    assert (
        parsed.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == f"system:node:{NODE}"
    )
    assert (
        parsed.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)[0].value == "system:nodes"
    )

    current = settings.pki_dir / "kubelet-client-current.pem"
    assert current.is_symlink() and mode(current.resolve()) == 0o600
    assert mode(settings.kubeconfig) == 0o600
    kubeconfig = yaml.safe_load(settings.kubeconfig.read_text())
    assert kubeconfig["users"][0]["user"] == {
        "client-certificate": str(current),
        "client-key": str(current),
    }
    (endpoint,) = server.endpoints
    assert endpoint.identity == "client-certificate" and endpoint.token is None
    assert endpoint.server == SERVER
    assert (
        csr.cert_info(endpoint.client_cert_pem or b"").subject
        == f"CN=system:node:{NODE},O=system:nodes"
    )
    assert endpoint == load_kubeconfig(settings.kubeconfig)


async def test_a_valid_kubeconfig_is_used_without_bootstrap(
    server: FakeApiServer,
    settings: CredentialSettings,
    approver: Approver,
    start: Callable[..., asyncio.Task[None]],
) -> None:
    start()
    await asyncio.sleep(2)
    first = server.endpoints[0]
    server.endpoints.clear()
    start()
    await asyncio.sleep(1)

    assert server.endpoints == [first]
    assert len(server.objects(CSRS)) == 1


async def test_an_expired_certificate_is_replaced_through_bootstrap(
    server: FakeApiServer,
    settings: CredentialSettings,
    approver: Approver,
    start: Callable[..., asyncio.Task[None]],
) -> None:
    start(settings=CredentialSettings(**{**settings.__dict__, "rotate_certificates": False}))
    await asyncio.sleep(1100)  # the 1000s certificate is now expired
    start()
    await asyncio.sleep(2)

    assert len(server.objects(CSRS)) == 2
    assert server.endpoints[-1].client_cert_pem != server.endpoints[0].client_cert_pem


async def test_a_denied_csr_is_retried_with_a_fresh_key(
    server: FakeApiServer,
    approver: Approver,
    start: Callable[..., asyncio.Task[None]],
) -> None:
    approver.deny_next = 1
    start()
    await asyncio.sleep(10)

    assert [h[2] for h in approver.handled] == ["Denied", "Approved"]
    assert approver.handled[0][1] != approver.handled[1][1]  # a new key, so a new CSR name
    assert len(server.endpoints) == 1


async def test_rotation_between_70_and_80_percent_swaps_the_identity(
    server: FakeApiServer,
    settings: CredentialSettings,
    approver: Approver,
    start: Callable[..., asyncio.Task[None]],
) -> None:
    start()
    await asyncio.sleep(800)

    # issued at 0.5s with notBefore 00:00:00 (whole seconds); rand 0.5: rotate at 75% of 1000s
    creates = [c.at for c in server.calls_to("create", "certificatesigningrequests")]
    assert creates == pytest.approx([0, 750])
    assert len(server.endpoints) == 2
    old, new = server.endpoints
    assert old.client_cert_pem != new.client_cert_pem
    assert len(list(settings.pki_dir.glob("kubelet-client-2*.pem"))) == 2


async def test_a_failed_certificate_helper_is_retried_with_backoff(
    server: FakeApiServer,
    approver: Approver,
    start: Callable[..., asyncio.Task[None]],
) -> None:
    failures = [isolated.IsolatedError("new_private_key_pem: certificate helper exited with 1")]

    async def flaky(fn: Callable[..., Any], *args: Any) -> Any:
        if failures:
            raise failures.pop()
        return fn(*args)

    start(isolate=flaky)
    await asyncio.sleep(10)

    assert not failures
    creates = [c.at for c in server.calls_to("create", "certificatesigningrequests")]
    assert creates == pytest.approx([2.0], abs=0.5)  # after the first backoff step
    assert len(server.endpoints) == 1


async def test_no_kubeconfig_and_no_bootstrap_is_a_configuration_error(
    settings: CredentialSettings,
    start: Callable[..., asyncio.Task[None]],
) -> None:
    task = start(settings=CredentialSettings(**{**settings.__dict__, "bootstrap_kubeconfig": None}))
    with pytest.raises(ConfigError, match=r"node\.kubeconfig: has no valid client credentials"):
        await task


def test_rotation_deadline_is_always_before_80_percent() -> None:
    t0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    info = csr.CertInfo(subject="x", not_before=t0, not_after=t0 + dt.timedelta(days=100))
    assert csr.rotation_deadline(info, 0.0) == t0 + dt.timedelta(days=70)
    assert csr.rotation_deadline(info, 0.999) < t0 + dt.timedelta(days=80)


def test_csr_name_is_stable_for_a_key() -> None:
    key = csr.new_private_key_pem()
    assert csr.csr_name(key, NODE) == csr.csr_name(key, NODE)
    assert csr.csr_name(key, NODE) != csr.csr_name(csr.new_private_key_pem(), NODE)
