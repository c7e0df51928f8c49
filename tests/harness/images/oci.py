"""Write OCI image layouts and tarballs, byte for byte the same on every build.

One image = one gzip layer built from a list of `Entry`s, an image config, a manifest, and an
`index.json` with one descriptor per name (containerd reads the full name from the
`io.containerd.image.name` annotation; `org.opencontainers.image.ref.name` carries the tag).
Every tar header has a fixed mtime, uid/gid 0 and no user names, gzip headers carry no time or
file name, and JSON is written with sorted keys, so equal inputs give equal digests.
"""

from __future__ import annotations

import dataclasses
import gzip
import hashlib
import io
import json
import platform
import tarfile
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

MEDIA_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
MEDIA_INDEX = "application/vnd.oci.image.index.v1+json"
MEDIA_CONFIG = "application/vnd.oci.image.config.v1+json"
MEDIA_LAYER = "application/vnd.oci.image.layer.v1.tar+gzip"
ANNOTATION_IMAGE_NAME = "io.containerd.image.name"
ANNOTATION_REF_NAME = "org.opencontainers.image.ref.name"
EPOCH = 0  # every mtime in every layer and the config's "created"
CREATED = "1970-01-01T00:00:00Z"


@dataclasses.dataclass(frozen=True, slots=True)
class Entry:
    """One file system object of a layer. `path` is relative, without a leading slash."""

    path: str
    kind: str  # "file" | "dir" | "symlink"
    mode: int = 0o755
    data: bytes = b""
    target: str = ""
    uid: int = 0
    gid: int = 0


@dataclasses.dataclass(frozen=True, slots=True)
class ImageConfig:
    """The runtime part of the image config (`config` in the OCI config JSON)."""

    cmd: tuple[str, ...] = ()
    entrypoint: tuple[str, ...] = ()
    env: tuple[str, ...] = ()
    user: str = ""
    working_dir: str = "/"


@dataclasses.dataclass(frozen=True, slots=True)
class Layout:
    """An OCI image layout on disk."""

    path: Path
    manifest_digest: str
    config_digest: str
    names: tuple[str, ...]


def host_arch() -> str:
    """The OCI architecture name of this machine (the binaries in the images are this host's)."""
    machine = platform.machine()
    return {"x86_64": "amd64", "aarch64": "arm64", "armv7l": "arm"}.get(machine, machine)


def digest_of(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def canonical_json(obj: Any) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()


def with_parents(entries: Iterable[Entry]) -> list[Entry]:
    """Add the missing parent directories (0755) and sort so parents precede children."""
    by_path = {e.path.strip("/"): e for e in entries}
    for path in list(by_path):
        parts = path.split("/")[:-1]
        for i in range(1, len(parts) + 1):
            parent = "/".join(parts[:i])
            by_path.setdefault(parent, Entry(path=parent, kind="dir"))
    return [dataclasses.replace(by_path[p], path=p) for p in sorted(by_path)]


def layer_tar(entries: Sequence[Entry]) -> bytes:
    """An uncompressed, deterministic tar of `entries` (its sha256 is the layer's diffID)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for entry in with_parents(entries):
            info = tarfile.TarInfo(entry.path + ("/" if entry.kind == "dir" else ""))
            info.mtime = EPOCH
            info.mode = entry.mode
            info.uid, info.gid = entry.uid, entry.gid
            info.uname = info.gname = ""
            if entry.kind == "dir":
                info.type = tarfile.DIRTYPE
                tar.addfile(info)
            elif entry.kind == "symlink":
                info.type = tarfile.SYMTYPE
                info.linkname = entry.target
                tar.addfile(info)
            elif entry.kind == "file":
                info.size = len(entry.data)
                tar.addfile(info, io.BytesIO(entry.data))
            else:
                raise ValueError(f"unknown entry kind {entry.kind!r} for {entry.path}")
    return buf.getvalue()


def gzip_bytes(data: bytes) -> bytes:
    out = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=out, compresslevel=6, mtime=EPOCH) as gz:
        gz.write(data)
    return out.getvalue()


def config_json(config: ImageConfig, diff_ids: Sequence[str], *, arch: str) -> bytes:
    runtime: dict[str, Any] = {"WorkingDir": config.working_dir}
    if config.cmd:
        runtime["Cmd"] = list(config.cmd)
    if config.entrypoint:
        runtime["Entrypoint"] = list(config.entrypoint)
    if config.env:
        runtime["Env"] = list(config.env)
    if config.user:
        runtime["User"] = config.user
    return canonical_json(
        {
            "architecture": arch,
            "os": "linux",
            "created": CREATED,
            "config": runtime,
            "rootfs": {"type": "layers", "diff_ids": list(diff_ids)},
            "history": [{"created": CREATED, "created_by": "nodeagent tests/harness/images"}],
        }
    )


def split_name(name: str) -> tuple[str, str]:
    """`registry.k8s.io/pause:3.10` -> (`registry.k8s.io/pause`, `3.10`); default tag latest."""
    slash = name.rfind("/")
    colon = name.rfind(":")
    if colon > slash:
        return name[:colon], name[colon + 1 :]
    return name, "latest"


def write_layout(
    dest: Path,
    *,
    entries: Sequence[Entry],
    config: ImageConfig,
    names: Sequence[str],
    arch: str | None = None,
) -> Layout:
    """Write an OCI image layout for one single-layer image into the empty directory `dest`."""
    arch = arch or host_arch()
    blobs = dest / "blobs" / "sha256"
    blobs.mkdir(parents=True)

    def put(data: bytes) -> str:
        digest = digest_of(data)
        (blobs / digest.removeprefix("sha256:")).write_bytes(data)
        return digest

    tar = layer_tar(entries)
    layer = gzip_bytes(tar)
    cfg = config_json(config, [digest_of(tar)], arch=arch)
    manifest = canonical_json(
        {
            "schemaVersion": 2,
            "mediaType": MEDIA_MANIFEST,
            "config": {"mediaType": MEDIA_CONFIG, "digest": put(cfg), "size": len(cfg)},
            "layers": [{"mediaType": MEDIA_LAYER, "digest": put(layer), "size": len(layer)}],
        }
    )
    manifest_digest = put(manifest)
    descriptors = [
        {
            "mediaType": MEDIA_MANIFEST,
            "digest": manifest_digest,
            "size": len(manifest),
            "platform": {"architecture": arch, "os": "linux"},
            "annotations": {ANNOTATION_IMAGE_NAME: name, ANNOTATION_REF_NAME: split_name(name)[1]},
        }
        for name in names
    ]
    index = {"schemaVersion": 2, "mediaType": MEDIA_INDEX, "manifests": descriptors}
    (dest / "index.json").write_bytes(canonical_json(index))
    (dest / "oci-layout").write_bytes(canonical_json({"imageLayoutVersion": "1.0.0"}))
    return Layout(
        path=dest,
        manifest_digest=manifest_digest,
        config_digest=digest_of(cfg),
        names=tuple(names),
    )


def pack(layout: Path, tarball: Path) -> None:
    """Write the layout directory as a deterministic tar (what `ctr images import` reads)."""
    files = sorted(p for p in layout.rglob("*"))
    with tarfile.open(tarball, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for path in files:
            info = tar.gettarinfo(str(path), arcname=str(path.relative_to(layout)))
            info.mtime = EPOCH
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            info.mode = 0o755 if path.is_dir() else 0o644
            if path.is_dir():
                tar.addfile(info)
            else:
                with path.open("rb") as fh:
                    tar.addfile(info, fh)


def read_index(layout: Path) -> list[dict[str, Any]]:
    index = json.loads((layout / "index.json").read_bytes())
    manifests: list[dict[str, Any]] = index["manifests"]
    return manifests


def read_blob(layout: Path, digest: str) -> bytes:
    algo, _, hexdigest = digest.partition(":")
    return (layout / "blobs" / algo / hexdigest).read_bytes()
