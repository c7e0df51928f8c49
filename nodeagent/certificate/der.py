"""Facts read from PEM certificates and EC keys with the standard library alone (pure).

The agent reads its certificates at every start (validity for rotation, "does this certificate
match this key"); loading the ``cryptography`` package for that costs ~10 MiB of RSS for the
life of the process (its own OpenSSL). These few fields of X.509 (RFC 5280) and of EC private
keys (RFC 5915, PKCS #8) are read here from the DER; making keys, CSRs and certificates still
uses ``cryptography``, in a child process (:mod:`nodeagent.certificate.isolated`).
"""

from __future__ import annotations

import base64
import datetime as dt
import re
from typing import Final

SEQUENCE: Final = 0x30
SET: Final = 0x31
INTEGER: Final = 0x02
BIT_STRING: Final = 0x03
OCTET_STRING: Final = 0x04
OID: Final = 0x06
UTC_TIME: Final = 0x17
GENERALIZED_TIME: Final = 0x18
EXPLICIT_0: Final = 0xA0
EXPLICIT_1: Final = 0xA1

# RFC 4514's short names, as cryptography's ``Name.rfc4514_string()`` writes them.
_NAMES: Final = {
    "2.5.4.3": "CN",
    "2.5.4.7": "L",
    "2.5.4.8": "ST",
    "2.5.4.10": "O",
    "2.5.4.11": "OU",
    "2.5.4.6": "C",
    "2.5.4.9": "STREET",
    "0.9.2342.19200300.100.1.25": "DC",
    "0.9.2342.19200300.100.1.1": "UID",
}
_PEM: Final = re.compile(rb"-----BEGIN ([A-Z0-9 ]+)-----\s*(.*?)\s*-----END \1-----", re.DOTALL)


def pem_blocks(pem: bytes) -> list[tuple[str, bytes]]:
    """(label, DER) of each PEM block, in order."""
    return [
        (m.group(1).decode(), base64.b64decode(b"".join(m.group(2).split())))
        for m in _PEM.finditer(pem)
    ]


def _first(pem: bytes, *labels: str) -> tuple[str, bytes]:
    for label, der in pem_blocks(pem):
        if label in labels:
            return label, der
    raise ValueError(f"no {' or '.join(labels)} PEM block")


def tlv(data: bytes, pos: int = 0) -> tuple[int, int, int]:
    """(tag, start of the value, end of the value) of the element at ``pos``."""
    if pos + 2 > len(data):
        raise ValueError("truncated DER")
    tag, length = data[pos], data[pos + 1]
    pos += 2
    if length & 0x80:
        count = length & 0x7F
        if count == 0 or count > 4 or pos + count > len(data):
            raise ValueError("bad DER length")
        length = int.from_bytes(data[pos : pos + count], "big")
        pos += count
    if pos + length > len(data):
        raise ValueError("truncated DER")
    return tag, pos, pos + length


def children(data: bytes, start: int, end: int) -> list[tuple[int, int, int]]:
    """The elements inside a constructed value ``data[start:end]``."""
    found = []
    while start < end:
        tag, value_start, value_end = tlv(data, start)
        found.append((tag, value_start, value_end))
        start = value_end
    return found


def _expect(element: tuple[int, int, int], tag: int, what: str) -> tuple[int, int, int]:
    if element[0] != tag:
        raise ValueError(f"{what}: DER tag {element[0]:#x}, want {tag:#x}")
    return element


def oid_string(value: bytes) -> str:
    if not value:
        raise ValueError("empty OID")
    parts = [*divmod(value[0], 40)] if value[0] < 80 else [2, value[0] - 80]
    n = 0
    for byte in value[1:]:
        n = (n << 7) | (byte & 0x7F)
        if not byte & 0x80:
            parts.append(n)
            n = 0
    return ".".join(map(str, parts))


def _time(tag: int, raw: bytes) -> dt.datetime:
    text = raw.decode("ascii")
    if not text.endswith("Z"):
        raise ValueError(f"certificate time {text!r} is not UTC")
    text = text[:-1].split(".")[0]
    if tag == UTC_TIME:
        year = int(text[:2])
        text = f"{1900 + year if year >= 50 else 2000 + year}{text[2:]}"
    elif tag != GENERALIZED_TIME:
        raise ValueError(f"certificate time: DER tag {tag:#x}")
    return dt.datetime.strptime(text, "%Y%m%d%H%M%S").replace(tzinfo=dt.UTC)


def _escape(value: str) -> str:
    out = "".join("\\" + c if c in '\\"+,;<>' else ("\\00" if c == "\0" else c) for c in value)
    if out.startswith(("#", " ")):
        out = "\\" + out
    if out.endswith(" ") and not out.endswith("\\ "):
        out = out[:-1] + "\\ "
    return out


def _tbs(cert_der: bytes) -> list[tuple[int, int, int]]:
    cert = _expect(tlv(cert_der), SEQUENCE, "certificate")
    tbs = _expect(children(cert_der, cert[1], cert[2])[0], SEQUENCE, "tbsCertificate")
    fields = children(cert_der, tbs[1], tbs[2])
    # Without the version: serial, signature, issuer, validity, subject, subjectPublicKeyInfo.
    return fields[1:] if fields and fields[0][0] == EXPLICIT_0 else fields


def validity(cert_pem: bytes) -> tuple[dt.datetime, dt.datetime]:
    """(notBefore, notAfter) of the first certificate in ``cert_pem``, UTC."""
    _, der = _first(cert_pem, "CERTIFICATE")
    seq = _expect(_tbs(der)[3], SEQUENCE, "validity")
    times = children(der, seq[1], seq[2])
    not_before, not_after = (_time(tag, der[s:e]) for tag, s, e in times[:2])
    return not_before, not_after


def subject(cert_pem: bytes) -> str:
    """The subject as RFC 4514 text (last RDN first), e.g. ``CN=system:node:a,O=system:nodes``."""
    _, der = _first(cert_pem, "CERTIFICATE")
    name = _expect(_tbs(der)[4], SEQUENCE, "subject")
    rdns = []
    for rdn in children(der, name[1], name[2]):
        parts = []
        for attr in children(der, rdn[1], rdn[2]):
            oid, value = children(der, attr[1], attr[2])[:2]
            dotted = oid_string(der[oid[1] : oid[2]])
            raw = der[value[1] : value[2]]
            text = raw.decode("utf-16-be") if value[0] == 0x1E else raw.decode("utf-8")
            parts.append(f"{_NAMES.get(dotted, dotted)}={_escape(text)}")
        rdns.append("+".join(parts))
    return ",".join(reversed(rdns))


def _bits(der: bytes, element: tuple[int, int, int]) -> bytes:
    _expect(element, BIT_STRING, "public key")
    return der[element[1] + 1 : element[2]]  # after the unused-bits byte


def cert_public_key(cert_pem: bytes) -> tuple[str, bytes]:
    """(algorithm parameters OID or algorithm OID, public key bits) of the certificate."""
    _, der = _first(cert_pem, "CERTIFICATE")
    spki = _expect(_tbs(der)[5], SEQUENCE, "subjectPublicKeyInfo")
    algorithm, key = children(der, spki[1], spki[2])[:2]
    return _curve(der, algorithm), _bits(der, key)


def _curve(der: bytes, algorithm: tuple[int, int, int]) -> str:
    parts = children(der, algorithm[1], algorithm[2])
    chosen = parts[1] if len(parts) > 1 and parts[1][0] == OID else parts[0]
    return oid_string(der[chosen[1] : chosen[2]])


def ec_public_key(key_pem: bytes) -> tuple[str, bytes] | None:
    """(curve OID, public point) an EC private key PEM carries (``EC PRIVATE KEY`` or PKCS #8
    ``PRIVATE KEY``); None when the key is not EC or does not embed its public key."""
    label, der = _first(key_pem, "EC PRIVATE KEY", "PRIVATE KEY")
    curve = ""
    if label == "PRIVATE KEY":
        info = _expect(tlv(der), SEQUENCE, "PrivateKeyInfo")
        _, algorithm, octets = children(der, info[1], info[2])[:3]
        _expect(algorithm, SEQUENCE, "privateKeyAlgorithm")
        parts = children(der, algorithm[1], algorithm[2])
        if oid_string(der[parts[0][1] : parts[0][2]]) != "1.2.840.10045.2.1":
            return None  # not id-ecPublicKey
        curve = _curve(der, algorithm)
        _expect(octets, OCTET_STRING, "privateKey")
        der = der[octets[1] : octets[2]]
    key = _expect(tlv(der), SEQUENCE, "ECPrivateKey")
    public = None
    for tag, start, _ in children(der, key[1], key[2]):
        if tag == EXPLICIT_0:
            _, oid_start, oid_end = tlv(der, start)
            curve = oid_string(der[oid_start:oid_end])
        elif tag == EXPLICIT_1:
            public = _bits(der, tlv(der, start))
    if public is None or not curve:
        return None
    return curve, public
