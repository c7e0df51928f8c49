"""Certificate facts read without cryptography (nodeagent.certificate.der) agree with what
cryptography reads; keys and CSRs are made in a child process that the agent waits for."""

from __future__ import annotations

import datetime as dt
import subprocess
import sys

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import NameOID

from nodeagent.certificate import csr, isolated
from nodeagent.server import tls

NOW = dt.datetime(2026, 11, 25, 4, 0, tzinfo=dt.UTC)


def certificate(
    key: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey,
    name: x509.Name,
    *,
    not_before: dt.datetime = NOW,
    not_after: dt.datetime = NOW + dt.timedelta(days=365),
) -> bytes:
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(not_before)
        .not_valid_after(not_after)
        .sign(key, hashes.SHA256())
    )
    return cert.public_bytes(serialization.Encoding.PEM)


def name(*pairs: tuple[x509.ObjectIdentifier, str]) -> x509.Name:
    return x509.Name([x509.NameAttribute(oid, value) for oid, value in pairs])


NODE_NAME = name(
    (NameOID.ORGANIZATION_NAME, "system:nodes"), (NameOID.COMMON_NAME, "system:node:a")
)


@pytest.mark.parametrize(
    "subject",
    [
        NODE_NAME,
        name((NameOID.COMMON_NAME, "node-a@1764043200")),
        name(
            (NameOID.COUNTRY_NAME, "DE"),
            (NameOID.ORGANIZATION_NAME, "a, b + c"),
            (NameOID.ORGANIZATIONAL_UNIT_NAME, " #lead"),
            (NameOID.COMMON_NAME, 'quote " and <angle>;'),
        ),
        x509.Name(
            [
                x509.RelativeDistinguishedName(
                    [
                        x509.NameAttribute(NameOID.COMMON_NAME, "multi"),
                        x509.NameAttribute(NameOID.ORGANIZATION_NAME, "valued"),
                    ]
                )
            ]
        ),
    ],
)
def test_subject_and_validity_as_cryptography_reads_them(subject: x509.Name) -> None:
    pem = certificate(ec.generate_private_key(ec.SECP256R1()), subject)
    info = csr.cert_info(pem)
    cert = x509.load_pem_x509_certificate(pem)
    assert info.subject == cert.subject.rfc4514_string()
    assert (info.not_before, info.not_after) == (
        cert.not_valid_before_utc,
        cert.not_valid_after_utc,
    )


def test_generalized_time_after_2049() -> None:
    late = dt.datetime(2061, 3, 4, 5, 6, 7, tzinfo=dt.UTC)
    pem = certificate(ec.generate_private_key(ec.SECP256R1()), NODE_NAME, not_after=late)
    assert csr.cert_info(pem).not_after == late
    assert csr.cert_info(pem).not_before == NOW


def test_key_matches_the_keys_nodeagent_makes() -> None:
    pkcs8 = csr.new_private_key_pem()
    assert pkcs8.startswith(b"-----BEGIN PRIVATE KEY-----")
    mine = serialization.load_pem_private_key(pkcs8, password=None)
    assert isinstance(mine, ec.EllipticCurvePrivateKey)
    other = csr.new_private_key_pem()
    cert = certificate(mine, NODE_NAME)
    assert csr.key_matches(cert, pkcs8)
    assert not csr.key_matches(cert, other)
    # The self-signed pair's key is "EC PRIVATE KEY" (traditional OpenSSL).
    cert_pem, key_pem = tls.self_signed_pair("node-a", ["10.0.0.5"], now=NOW)
    assert key_pem.startswith(b"-----BEGIN EC PRIVATE KEY-----")
    assert csr.key_matches(cert_pem, key_pem)
    assert not csr.key_matches(cert_pem, pkcs8)
    # Another curve with the same point length never matches.
    p384 = ec.generate_private_key(ec.SECP384R1())
    assert not csr.key_matches(certificate(p384, NODE_NAME), pkcs8)


def test_an_rsa_certificate_does_not_match_an_ec_key_and_an_rsa_key_is_refused() -> None:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    cert = certificate(key, NODE_NAME)
    assert csr.cert_info(cert).subject == "CN=system:node:a,O=system:nodes"
    assert not csr.key_matches(cert, csr.new_private_key_pem())
    rsa_pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    with pytest.raises(ValueError, match="not an EC private key"):
        csr.key_matches(cert, rsa_pem)


@pytest.mark.parametrize(
    "garbage",
    [b"", b"not a pem", b"-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"],
)
def test_what_is_not_a_certificate_is_a_value_error(garbage: bytes) -> None:
    with pytest.raises(ValueError):
        csr.cert_info(garbage)


def test_the_child_process_makes_keys_and_raises_its_errors_here() -> None:
    key = isolated.run(csr.new_private_key_pem)
    assert csr.key_matches(certificate(load(key), NODE_NAME), key)
    assert isolated.run(csr.csr_object, key, "a")["metadata"] == {"name": csr.csr_name(key, "a")}
    with pytest.raises(ValueError, match="must be an ECDSA key"):
        isolated.run(csr.csr_pem, rsa_key_pem(), "a")


def test_the_agent_never_imports_cryptography() -> None:
    code = "import sys, nodeagent.agent; print('cryptography' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"


def load(pem: bytes) -> ec.EllipticCurvePrivateKey:
    key = serialization.load_pem_private_key(pem, password=None)
    assert isinstance(key, ec.EllipticCurvePrivateKey)
    return key


def rsa_key_pem() -> bytes:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048).private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
