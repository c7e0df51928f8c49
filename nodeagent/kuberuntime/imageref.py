"""Image reference normalisation as containerd applies it (the docker reference rules).

``busybox`` and ``docker.io/library/busybox:latest`` name the same image; the runtime reports
the long form in ``repo_tags``. Pure functions, no I/O.
"""

from __future__ import annotations

from typing import Final, NamedTuple

DEFAULT_DOMAIN: Final = "docker.io"
LEGACY_DOMAIN: Final = "index.docker.io"
OFFICIAL_PREFIX: Final = "library/"
DEFAULT_TAG: Final = "latest"


class ImageRef(NamedTuple):
    domain: str
    path: str
    tag: str
    digest: str

    @property
    def repository(self) -> str:
        return f"{self.domain}/{self.path}"

    def __str__(self) -> str:
        text = self.repository
        if self.tag:
            text += f":{self.tag}"
        if self.digest:
            text += f"@{self.digest}"
        return text


def parse_image_ref(ref: str) -> ImageRef:
    """Split ``ref`` into domain, path, tag and digest, filling in docker's defaults.

    >>> str(parse_image_ref("busybox"))
    'docker.io/library/busybox:latest'
    >>> str(parse_image_ref("localhost:5000/busybox@sha256:ab"))
    'localhost:5000/busybox@sha256:ab'
    """
    if not ref or ref != ref.strip():
        raise ValueError(f"invalid image reference {ref!r}")
    name, _, digest = ref.partition("@")
    tag = ""
    slash = name.rfind("/")
    colon = name.rfind(":")
    if colon > slash:
        name, tag = name[:colon], name[colon + 1 :]
    first, sep, rest = name.partition("/")
    is_domain = sep and ("." in first or ":" in first or first == "localhost")
    domain, path = (first, rest) if is_domain else (DEFAULT_DOMAIN, name)
    if domain == LEGACY_DOMAIN:
        domain = DEFAULT_DOMAIN
    if domain == DEFAULT_DOMAIN and "/" not in path:
        path = OFFICIAL_PREFIX + path
    if not path or path.endswith("/") or (tag == "" and colon > slash):
        raise ValueError(f"invalid image reference {ref!r}")
    if not tag and not digest:
        tag = DEFAULT_TAG
    return ImageRef(domain=domain, path=path, tag=tag, digest=digest)


def normalize_image_ref(ref: str) -> str:
    """The fully qualified form of ``ref`` (``docker.io/library/busybox:latest``)."""
    return str(parse_image_ref(ref))
