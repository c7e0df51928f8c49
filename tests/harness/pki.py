"""The cluster PKI for test control planes, generated with `cryptography`.

One directory holds every key and certificate the control plane and its nodes need, named as
kubeadm names them (``ca.crt``, ``apiserver.crt``, ``front-proxy-ca.crt``, ``sa.key``, ...).
Keys are ECDSA P-256 and written 0600. Certificate lifetimes are configurable, so tests can issue
certificates that expire within minutes.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import ssl
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

DEFAULT_VALIDITY = datetime.timedelta(days=365)
CLOCK_SKEW = datetime.timedelta(minutes=5)  # not_before this far back, as kubeadm does

PrivateKey = ec.EllipticCurvePrivateKey


@dataclass(frozen=True, kw_only=True)
class CertPair:
    cert: Path
    key: Path


def tls_client_context(
    client: CertPair | None = None, *, ca: Path | None = None, check_hostname: bool = True
) -> ssl.SSLContext:
    """A TLS client context presenting `client`'s certificate, if any. With `ca` the server's
    certificate is checked against it (and its host name, unless `check_hostname` is off);
    without, not at all: a node's or a component's self-signed serving certificate."""
    context = ssl.create_default_context(cafile=str(ca) if ca is not None else None)
    if ca is None:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    else:
        context.check_hostname = check_hostname
    if client is not None:
        context.load_cert_chain(str(client.cert), str(client.key))
    return context


def new_key() -> PrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def write_private(path: Path, data: bytes) -> None:
    """Write a secret file that is 0600 from the moment it exists."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as out:
        out.write(data)
    path.chmod(0o600)


def key_pem(key: PrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def load_key(path: Path) -> PrivateKey:
    key = serialization.load_pem_private_key(path.read_bytes(), password=None)
    if not isinstance(key, ec.EllipticCurvePrivateKey):
        raise TypeError(f"{path}: expected an EC private key")
    return key


def subject(common_name: str, organizations: tuple[str, ...] = ()) -> x509.Name:
    parts = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, org) for org in organizations]
    parts.append(x509.NameAttribute(NameOID.COMMON_NAME, common_name))
    return x509.Name(parts)


def self_signed_ca(
    common_name: str, key: PrivateKey, validity: datetime.timedelta
) -> x509.Certificate:
    now = datetime.datetime.now(datetime.UTC)
    name = subject(common_name)
    return (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - CLOCK_SKEW)
        .not_valid_after(now + validity)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=True,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )


def san_entries(names: tuple[str, ...]) -> list[x509.GeneralName]:
    entries: list[x509.GeneralName] = []
    for name in names:
        try:
            entries.append(x509.IPAddress(ipaddress.ip_address(name)))
        except ValueError:
            entries.append(x509.DNSName(name))
    return entries


@dataclass(frozen=True, kw_only=True)
class Authority:
    """A CA on disk that issues leaf certificates."""

    pair: CertPair
    default_validity: datetime.timedelta

    def issue(
        self,
        *,
        directory: Path,
        name: str,
        common_name: str,
        organizations: tuple[str, ...] = (),
        sans: tuple[str, ...] = (),
        server: bool = False,
        client: bool = True,
        validity: datetime.timedelta | None = None,
    ) -> CertPair:
        """Write ``<name>.crt`` and ``<name>.key`` signed by this CA."""
        ca_cert = x509.load_pem_x509_certificate(self.pair.cert.read_bytes())
        ca_key = load_key(self.pair.key)
        key = new_key()
        now = datetime.datetime.now(datetime.UTC)
        usages = [ExtendedKeyUsageOID.SERVER_AUTH] * server + [
            ExtendedKeyUsageOID.CLIENT_AUTH
        ] * client
        builder = (
            x509.CertificateBuilder()
            .subject_name(subject(common_name, organizations))
            .issuer_name(ca_cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - CLOCK_SKEW)
            .not_valid_after(now + (validity or self.default_validity))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    content_commitment=False,
                    key_encipherment=True,
                    data_encipherment=False,
                    key_agreement=False,
                    key_cert_sign=False,
                    crl_sign=False,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
                critical=False,
            )
        )
        if sans:
            builder = builder.add_extension(
                x509.SubjectAlternativeName(san_entries(sans)), critical=False
            )
        cert = builder.sign(ca_key, hashes.SHA256())
        pair = CertPair(cert=directory / f"{name}.crt", key=directory / f"{name}.key")
        write_private(pair.key, key_pem(key))
        pair.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        return pair


def create_authority(
    *, directory: Path, name: str, common_name: str, validity: datetime.timedelta
) -> Authority:
    key = new_key()
    cert = self_signed_ca(common_name, key, validity)
    pair = CertPair(cert=directory / f"{name}.crt", key=directory / f"{name}.key")
    write_private(pair.key, key_pem(key))
    pair.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return Authority(pair=pair, default_validity=validity)


@dataclass(frozen=True, kw_only=True)
class Pki:
    """Every credential of one control plane; see `create_pki`."""

    directory: Path
    ca: Authority
    front_proxy_ca: Authority
    apiserver: CertPair
    apiserver_kubelet_client: CertPair
    front_proxy_client: CertPair
    admin: CertPair
    controller_manager: CertPair
    scheduler: CertPair
    service_account_key: Path
    service_account_pub: Path

    def node_client_cert(
        self, name: str, *, validity: datetime.timedelta | None = None
    ) -> CertPair:
        """The client certificate of node `name`: CN=system:node:<name>, O=system:nodes."""
        return self.ca.issue(
            directory=self.directory / "nodes",
            name=name,
            common_name=f"system:node:{name}",
            organizations=("system:nodes",),
            validity=validity,
        )

    def client_cert(
        self,
        name: str,
        *,
        common_name: str,
        organizations: tuple[str, ...] = (),
        validity: datetime.timedelta | None = None,
    ) -> CertPair:
        """Any other client identity signed by the cluster CA."""
        return self.ca.issue(
            directory=self.directory / "clients",
            name=name,
            common_name=common_name,
            organizations=organizations,
            validity=validity,
        )


def create_pki(
    *,
    directory: Path,
    service_ip: str,
    extra_sans: tuple[str, ...] = (),
    validity: datetime.timedelta = DEFAULT_VALIDITY,
    cluster_domain: str = "cluster.local",
) -> Pki:
    """Generate the whole PKI into `directory` (created 0700)."""
    directory.mkdir(parents=True, exist_ok=True)
    directory.chmod(0o700)
    ca = create_authority(
        directory=directory, name="ca", common_name="kubernetes", validity=validity
    )
    front = create_authority(
        directory=directory, name="front-proxy-ca", common_name="front-proxy-ca", validity=validity
    )
    sans = (
        "127.0.0.1",
        "localhost",
        service_ip,
        "kubernetes",
        "kubernetes.default",
        "kubernetes.default.svc",
        f"kubernetes.default.svc.{cluster_domain}",
        *extra_sans,
    )
    sa_key = new_key()
    write_private(directory / "sa.key", key_pem(sa_key))
    (directory / "sa.pub").write_bytes(
        sa_key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    ca.issue(
        directory=directory,
        name="apiserver",
        common_name="kube-apiserver",
        sans=sans,
        server=True,
        client=False,
    )
    ca.issue(
        directory=directory,
        name="apiserver-kubelet-client",
        common_name="kube-apiserver-kubelet-client",
        organizations=("system:masters",),
    )
    front.issue(directory=directory, name="front-proxy-client", common_name="front-proxy-client")
    ca.issue(
        directory=directory,
        name="admin",
        common_name="kubernetes-admin",
        organizations=("system:masters",),
    )
    ca.issue(
        directory=directory, name="controller-manager", common_name="system:kube-controller-manager"
    )
    ca.issue(directory=directory, name="scheduler", common_name="system:kube-scheduler")
    return load_pki(directory=directory, validity=validity)


def load_pki(*, directory: Path, validity: datetime.timedelta = DEFAULT_VALIDITY) -> Pki:
    """The PKI that `create_pki` wrote into `directory` (used again by a second `up`)."""

    def pair(name: str) -> CertPair:
        return CertPair(cert=directory / f"{name}.crt", key=directory / f"{name}.key")

    return Pki(
        directory=directory,
        ca=Authority(pair=pair("ca"), default_validity=validity),
        front_proxy_ca=Authority(pair=pair("front-proxy-ca"), default_validity=validity),
        apiserver=pair("apiserver"),
        apiserver_kubelet_client=pair("apiserver-kubelet-client"),
        front_proxy_client=pair("front-proxy-client"),
        admin=pair("admin"),
        controller_manager=pair("controller-manager"),
        scheduler=pair("scheduler"),
        service_account_key=directory / "sa.key",
        service_account_pub=directory / "sa.pub",
    )
