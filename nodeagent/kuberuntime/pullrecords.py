"""The kubelet's image pull records under ``<rootDir>/image_manager/`` (its
``fsPullRecordsAccessor``), in its file format, so they survive a restart of the agent:

- ``pulling/sha256-<sha256(image)>``: an ``ImagePullIntent`` written before a pull and
  removed after it, ``{"kind":"ImagePullIntent","apiVersion":"kubelet.config.k8s.io/v1beta1",
  "image":"..."}``;
- ``pulled/sha256-<sha256(imageRef)>``: an ``ImagePulledRecord``: the image ID the runtime
  returned and, per image name without tag or digest, who may use it: ``nodePodsAccessible``
  (pulled without credentials), or the ``kubernetesSecrets`` (uid, namespace, name and the
  hash of the credential used) or ``kubernetesServiceAccounts`` that pulled it.

Directories are 0700 and files 0600 (they name secrets, never hold credentials); each file is
written to ``<name>.tmp`` and renamed. ``v1alpha1`` records are read as well. A record that
does not decode is an error for the caller (which then checks the credentials).
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
from typing import Any, Final

API_VERSION: Final = "kubelet.config.k8s.io/v1beta1"
READ_VERSIONS: Final = ("kubelet.config.k8s.io/v1beta1", "kubelet.config.k8s.io/v1alpha1")
PREFIX: Final = "sha256-"
TMP_SUFFIX: Final = ".tmp"
MAX_RECORD: Final = 1 << 20


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


def _go_time(when: datetime.datetime) -> str:
    return when.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


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
        "lastUpdatedTime": _go_time(record.last_updated),
        "imageRef": record.image_ref,
    }
    if record.credentials:
        doc["credentialMapping"] = {
            image: encode_credentials(c) for image, c in sorted(record.credentials.items())
        }
    return json.dumps(doc, separators=(",", ":")).encode() + b"\n"


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


def decode_record(data: bytes) -> PulledRecord:
    try:
        doc = json.loads(data)
    except (ValueError, UnicodeDecodeError) as e:
        raise RecordError(f"not JSON: {e}") from e
    if not isinstance(doc, dict) or doc.get("kind") != "ImagePulledRecord":
        raise RecordError("not an ImagePulledRecord")
    if doc.get("apiVersion") not in READ_VERSIONS:
        raise RecordError(f"unknown apiVersion {doc.get('apiVersion')!r}")
    ref = doc.get("imageRef")
    if not isinstance(ref, str):
        raise RecordError("no imageRef")
    try:
        when = datetime.datetime.fromisoformat(str(doc.get("lastUpdatedTime", "")))
    except ValueError:
        when = datetime.datetime.fromtimestamp(0, datetime.UTC)
    mapping = doc.get("credentialMapping") or {}
    if not isinstance(mapping, dict):
        raise RecordError("credentialMapping is not an object")
    creds = {str(image): decode_credentials(raw) for image, raw in mapping.items()}
    return PulledRecord(image_ref=ref, last_updated=when, credentials=creds)


def decode_intent(data: bytes) -> str:
    try:
        doc = json.loads(data)
    except (ValueError, UnicodeDecodeError) as e:
        raise RecordError(f"not JSON: {e}") from e
    if not isinstance(doc, dict) or doc.get("kind") != "ImagePullIntent":
        raise RecordError("not an ImagePullIntent")
    if doc.get("apiVersion") not in READ_VERSIONS or not isinstance(doc.get("image"), str):
        raise RecordError("not an ImagePullIntent of a known version")
    image: str = doc["image"]
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
        target = directory / name
        tmp = directory / (name + TMP_SUFFIX)
        flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC
        fd = os.open(tmp, flags, 0o600)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.replace(tmp, target)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise

    @staticmethod
    def _read(path: Path) -> bytes | None:
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except FileNotFoundError:
            return None
        with os.fdopen(fd, "rb") as f:
            return f.read(MAX_RECORD)

    def write_intent(self, image: str) -> None:
        doc = {"kind": "ImagePullIntent", "apiVersion": API_VERSION, "image": image}
        self._write(self.pulling, cache_filename(image), json.dumps(doc).encode() + b"\n")

    def delete_intent(self, image: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.pulling / cache_filename(image))

    def intent_exists(self, image: str) -> bool:
        data = self._read(self.pulling / cache_filename(image))
        return data is not None and decode_intent(data) == image

    def intents(self) -> list[str]:
        return [decode_intent(d) for d in self._each(self.pulling)]

    def pulled_record(self, image_ref: str) -> PulledRecord | None:
        """The record of ``image_ref``; None when there is none; RecordError when it does
        not decode."""
        data = self._read(self.pulled / cache_filename(image_ref))
        if data is None:
            return None
        record = decode_record(data)
        return record if record.image_ref == image_ref else None

    def write_pulled(self, record: PulledRecord) -> None:
        self._write(self.pulled, cache_filename(record.image_ref), encode_record(record))

    def _each(self, directory: Path) -> list[bytes]:
        try:
            names = sorted(os.listdir(directory))
        except FileNotFoundError:
            return []
        out = []
        for name in names:
            if name.startswith(PREFIX) and not name.endswith(TMP_SUFFIX):
                data = self._read(directory / name)
                if data is not None:
                    out.append(data)
        return out
