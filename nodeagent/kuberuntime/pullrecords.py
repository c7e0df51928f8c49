"""The kubelet's image pull records under ``<rootDir>/image_manager/`` (its
``fsPullRecordsAccessor``), in its file format, so they survive a restart of the agent:

- ``pulling/sha256-<sha256(image)>``: an ``ImagePullIntent`` written before a pull and
  removed after it, ``{"kind":"ImagePullIntent","apiVersion":"kubelet.config.k8s.io/v1beta1",
  "image":"..."}``;
- ``pulled/sha256-<sha256(imageRef)>``: an ``ImagePulledRecord``: the image ID the runtime
  returned and, per image name without tag or digest, who may use it: ``nodePodsAccessible``
  (pulled without credentials), or the ``kubernetesSecrets`` (uid, namespace, name and the
  hash of the credential used) or ``kubernetesServiceAccounts`` that pulled it.

Both are compact JSON ending in a newline, as the kubelet's encoder writes them; a record
either agent wrote is read by the other. Directories are 0700 and files 0600 (they name
secrets, never hold credentials); each file is written to ``<name>.tmp`` and renamed.
``v1alpha1`` files are read as well, and :meth:`PullRecords.migrate` rewrites them as
``v1beta1`` (the kubelet's ``recordsVersionMigration``). A record that does not decode is an
error for the caller (which then checks the credentials); a listing skips it and reports it.
"""

from __future__ import annotations

import contextlib
import datetime
import hashlib
import json
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, TypeVar

from nodeagent.atomicfile import write_atomic
from nodeagent.gotext import parse_rfc3339, rfc3339

API_VERSION: Final = "kubelet.config.k8s.io/v1beta1"
READ_VERSIONS: Final = ("kubelet.config.k8s.io/v1beta1", "kubelet.config.k8s.io/v1alpha1")
PREFIX: Final = "sha256-"
TMP_SUFFIX: Final = ".tmp"
MAX_RECORD: Final = 1 << 20

T = TypeVar("T")


class RecordError(ValueError):
    pass


@dataclass(frozen=True, slots=True, order=True)
class SecretRef:
    namespace: str
    name: str
    uid: str
    credential_hash: str = ""


@dataclass(frozen=True, slots=True, order=True)
class ServiceAccountRef:
    namespace: str
    name: str
    uid: str


@dataclass(frozen=True, slots=True)
class PullCredentials:
    node_pods_accessible: bool = False
    secrets: tuple[SecretRef, ...] = ()
    service_accounts: tuple[ServiceAccountRef, ...] = ()


@dataclass(frozen=True, slots=True)
class PulledRecord:
    image_ref: str
    last_updated: datetime.datetime
    credentials: dict[str, PullCredentials] = field(default_factory=dict)


def cache_filename(key: str) -> str:
    return PREFIX + hashlib.sha256(key.encode()).hexdigest()


def _compact(doc: dict[str, Any]) -> bytes:
    """Go's ``json.Encoder``: no spaces, a newline at the end."""
    return json.dumps(doc, separators=(",", ":")).encode() + b"\n"


def encode_credentials(creds: PullCredentials) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if creds.secrets:
        out["kubernetesSecrets"] = [
            {
                "uid": s.uid,
                "namespace": s.namespace,
                "name": s.name,
                "credentialHash": s.credential_hash,
            }
            for s in creds.secrets
        ]
    if creds.service_accounts:
        out["kubernetesServiceAccounts"] = [
            {"uid": s.uid, "namespace": s.namespace, "name": s.name} for s in creds.service_accounts
        ]
    if creds.node_pods_accessible:
        out["nodePodsAccessible"] = True
    return out


def encode_record(record: PulledRecord) -> bytes:
    doc: dict[str, Any] = {
        "kind": "ImagePulledRecord",
        "apiVersion": API_VERSION,
        "lastUpdatedTime": rfc3339(record.last_updated),
        "imageRef": record.image_ref,
    }
    if record.credentials:
        doc["credentialMapping"] = {
            image: encode_credentials(c) for image, c in sorted(record.credentials.items())
        }
    return _compact(doc)


def encode_intent(image: str) -> bytes:
    return _compact({"kind": "ImagePullIntent", "apiVersion": API_VERSION, "image": image})


def _strs(item: Any, *keys: str) -> tuple[str, ...]:
    if not isinstance(item, dict):
        raise RecordError("not an object")
    values = tuple(item.get(k, "") for k in keys)
    if not all(isinstance(v, str) for v in values):
        raise RecordError("not a string")
    return values


def decode_credentials(raw: Any) -> PullCredentials:
    if not isinstance(raw, dict):
        raise RecordError("credentials are not an object")
    secrets = tuple(
        SecretRef(namespace=ns, name=n, uid=u, credential_hash=h)
        for u, ns, n, h in (
            _strs(s, "uid", "namespace", "name", "credentialHash")
            for s in raw.get("kubernetesSecrets") or ()
        )
    )
    accounts = tuple(
        ServiceAccountRef(namespace=ns, name=n, uid=u)
        for u, ns, n in (
            _strs(s, "uid", "namespace", "name") for s in raw.get("kubernetesServiceAccounts") or ()
        )
    )
    return PullCredentials(
        node_pods_accessible=raw.get("nodePodsAccessible") is True,
        secrets=secrets,
        service_accounts=accounts,
    )


def _document(data: bytes, kind: str) -> dict[str, Any]:
    try:
        doc = json.loads(data)
    except (ValueError, UnicodeDecodeError) as e:
        raise RecordError(f"not JSON: {e}") from e
    if not isinstance(doc, dict) or doc.get("kind") != kind:
        raise RecordError(f"not an {kind}")
    if doc.get("apiVersion") not in READ_VERSIONS:
        raise RecordError(f"unknown apiVersion {str(doc.get('apiVersion'))[:100]!r}")
    return doc


def is_current(data: bytes) -> bool:
    """Whether a file that decodes was written in the version written now."""
    try:
        doc = json.loads(data)
    except (ValueError, UnicodeDecodeError):
        return False
    return isinstance(doc, dict) and doc.get("apiVersion") == API_VERSION


def decode_record(data: bytes) -> PulledRecord:
    doc = _document(data, "ImagePulledRecord")
    ref = doc.get("imageRef")
    if not isinstance(ref, str):
        raise RecordError("no imageRef")
    when = parse_rfc3339(doc.get("lastUpdatedTime")) or datetime.datetime.fromtimestamp(
        0, datetime.UTC
    )
    mapping = doc.get("credentialMapping")
    if mapping is None:
        mapping = {}
    if not isinstance(mapping, dict):
        raise RecordError("credentialMapping is not an object")
    creds = {str(image): decode_credentials(raw) for image, raw in mapping.items()}
    return PulledRecord(image_ref=ref, last_updated=when, credentials=creds)


def decode_intent(data: bytes) -> str:
    image = _document(data, "ImagePullIntent").get("image")
    if not isinstance(image, str):
        raise RecordError("no image")
    return image


class PullRecords:
    """The two record directories (made on first use)."""

    def __init__(self, root_dir: str | Path, *, now: Callable[[], datetime.datetime]) -> None:
        base = Path(root_dir) / "image_manager"
        self.pulling = base / "pulling"
        self.pulled = base / "pulled"
        self.now = now
        self._made = False

    def _dirs(self) -> None:
        if not self._made:
            for path in (self.pulling, self.pulled):
                path.mkdir(mode=0o700, parents=True, exist_ok=True)
            self._made = True

    def _write(self, directory: Path, name: str, data: bytes) -> None:
        self._dirs()
        write_atomic(directory / name, data, mode=0o600, dir_mode=0o700)

    @staticmethod
    def _read(path: Path) -> bytes | None:
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except FileNotFoundError:
            return None
        with os.fdopen(fd, "rb") as f:
            return f.read(MAX_RECORD)

    def write_intent(self, image: str) -> None:
        self._write(self.pulling, cache_filename(image), encode_intent(image))

    def delete_intent(self, image: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.pulling / cache_filename(image))

    def intent_exists(self, image: str) -> bool:
        data = self._read(self.pulling / cache_filename(image))
        return data is not None and decode_intent(data) == image

    def intents(self) -> tuple[list[str], list[str]]:
        """Every intent's image, and the errors of the files that did not decode."""
        return self._list(self.pulling, decode_intent)

    def pulled_record(self, image_ref: str) -> PulledRecord | None:
        """The record of ``image_ref``; None when there is none; RecordError when it does
        not decode."""
        data = self._read(self.pulled / cache_filename(image_ref))
        if data is None:
            return None
        record = decode_record(data)
        return record if record.image_ref == image_ref else None

    def pulled_records(self) -> tuple[list[PulledRecord], list[str]]:
        """Every pulled record, and the errors of the files that did not decode."""
        return self._list(self.pulled, decode_record)

    def write_pulled(self, record: PulledRecord) -> None:
        self._write(self.pulled, cache_filename(record.image_ref), encode_record(record))

    def delete_pulled(self, image_ref: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.pulled / cache_filename(image_ref))

    def migrate(self) -> list[str]:
        """Rewrite the files of an older version (``v1alpha1``) in the current one; the
        errors of those that could not be."""
        errors: list[str] = []
        for path, data in self._each(self.pulling):
            try:
                if not is_current(data):
                    self.write_intent(decode_intent(data))
            except (RecordError, OSError) as e:
                errors.append(f"failed to migrate {str(path)!r}: {e}")
        for path, data in self._each(self.pulled):
            try:
                if not is_current(data):
                    self.write_pulled(decode_record(data))
            except (RecordError, OSError) as e:
                errors.append(f"failed to migrate {str(path)!r}: {e}")
        return errors

    def _list(self, directory: Path, decode: Callable[[bytes], T]) -> tuple[list[T], list[str]]:
        found: list[T] = []
        errors: list[str] = []
        for path, data in self._each(directory, errors):
            try:
                found.append(decode(data))
            except RecordError as e:
                errors.append(f"failed to deserialize content of file {str(path)!r}: {e}")
        return found, errors

    def _each(self, directory: Path, errors: list[str] | None = None) -> list[tuple[Path, bytes]]:
        """The record files of ``directory`` (``sha256-*``, not ``*.tmp``) with their bytes."""
        try:
            names = sorted(os.listdir(directory))
        except FileNotFoundError:
            return []
        out = []
        for name in names:
            if not name.startswith(PREFIX) or name.endswith(TMP_SUFFIX):
                continue
            path = directory / name
            try:
                data = self._read(path)
            except OSError as e:  # a directory, a link, unreadable
                if errors is not None:
                    errors.append(f"failed to read {str(path)!r}: {e.strerror or e}")
                continue
            if data is not None:
                out.append((path, data))
        return out
