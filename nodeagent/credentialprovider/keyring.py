"""The kubelet's docker keyring: which registry credentials apply to an image.

A keyring entry is keyed by ``host[:port][/path]`` (a scheme and a ``/v1/`` or ``/v2/`` path
prefix are dropped). :meth:`Keyring.lookup` takes an image's repository (``docker.io/library/
busybox``, ``registry.example.com:5000/team/app``) and returns the credentials of every key
that matches it, keys in reverse lexical order so the more specific paths of one host come
first, and the credentials of one key in the order they were added. A key matches when the
ports are equal, the host has as many dot-separated parts as the image's, each part matches as
a glob (``*.example.com``), and the key's path is a prefix of the image's. Without a match,
an ``index.docker.io`` entry serves the images Docker Hub holds. Each credential carries the
source it came from (a pull secret, a service account, or none: the node's) and, for the pull
records, a hash of its content.
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Final, NamedTuple

from nodeagent.credentialprovider.dockerconfig import DockerConfig

DEFAULT_REGISTRY_HOST: Final = "index.docker.io"


@dataclass(frozen=True, slots=True)
class AuthConfig:
    """Credentials for one registry, as the CRI ``AuthConfig`` carries them."""

    username: str = ""
    password: str = field(default="", repr=False)
    auth: str = field(default="", repr=False)
    email: str = ""
    server_address: str = ""
    identity_token: str = field(default="", repr=False)
    registry_token: str = field(default="", repr=False)

    def __repr__(self) -> str:
        return f"AuthConfig(username={self.username!r}, <credentials redacted>)"


@dataclass(frozen=True, slots=True)
class SecretCoordinates:
    uid: str
    namespace: str
    name: str


@dataclass(frozen=True, slots=True)
class ServiceAccountCoordinates:
    uid: str
    namespace: str
    name: str


@dataclass(frozen=True, slots=True)
class CredentialSource:
    secret: SecretCoordinates | None = None
    service_account: ServiceAccountCoordinates | None = None


@dataclass(frozen=True, slots=True)
class TrackedAuthConfig:
    """A credential, where it came from (None: the node's own) and its content's hash."""

    auth: AuthConfig
    source: CredentialSource | None = None
    hash: str = ""


def _go_json_string(text: str) -> str:
    """A string as Go's ``json.Marshal`` writes it (HTML characters escaped)."""
    out = json.dumps(text, ensure_ascii=False)
    for char, escaped in (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026")):
        out = out.replace(char, escaped)
    return out.replace("\u2028", "\\u2028").replace("\u2029", "\\u2029")


def hash_auth_config(auth: AuthConfig) -> str:
    """sha256 (hex) of the credential's JSON as the kubelet's ``hashAuthConfig`` marshals it."""
    parts = [
        (name, value)
        for name, value in (
            ("username", auth.username),
            ("password", auth.password),
            ("auth", auth.auth),
            ("email", auth.email),
            ("serveraddress", auth.server_address),
            ("identitytoken", auth.identity_token),
            ("registrytoken", auth.registry_token),
        )
        if value
    ]
    text = "{" + ",".join(f'"{n}":{_go_json_string(v)}' for n, v in parts) + "}"
    return hashlib.sha256(text.encode()).hexdigest()


class _Url(NamedTuple):
    host: str
    port: str
    path: str


def _split_host_port(hostport: str) -> tuple[str, str] | None:
    """Go's ``net.SplitHostPort``, None where it fails (no port)."""
    if hostport.startswith("["):
        end = hostport.find("]")
        if end < 0 or hostport[end + 1 : end + 2] != ":":
            return None
        return hostport[1:end], hostport[end + 2 :]
    host, sep, port = hostport.rpartition(":")
    if not sep or ":" in host:
        return None
    return host, port


def parse_schemeless(text: str) -> _Url:
    """A ``host[:port][/path]`` as Go's ``url.Parse("https://" + text)`` splits it."""
    rest = text
    for cut in ("?", "#"):
        rest = rest.split(cut, 1)[0]
    slash = rest.find("/")
    hostport, path = (rest, "") if slash < 0 else (rest[:slash], rest[slash:])
    if "@" in hostport:
        hostport = hostport.rsplit("@", 1)[1]
    if any(c in hostport for c in " \t\n\\") or "%" in hostport:
        raise ValueError(f"invalid character in host name {hostport!r}")
    split = _split_host_port(hostport)
    host, port = split if split is not None else (hostport, "")
    return _Url(host=host, port=port, path=path)


def urls_match(glob: str, target: str) -> bool:
    """The kubelet's ``URLsMatchStr``: same port, same number of host parts each matching as
    a glob, the glob's path a prefix of the target's. Unparsable input matches nothing."""
    try:
        g, t = parse_schemeless(glob), parse_schemeless(target)
    except ValueError:
        return False
    if g.port != t.port:
        return False
    g_parts, t_parts = g.host.split("."), t.host.split(".")
    if len(g_parts) != len(t_parts) or not t.path.startswith(g.path):
        return False
    return all(fnmatch.fnmatchcase(tp, gp) for gp, tp in zip(g_parts, t_parts, strict=True))


def registry_key(location: str) -> str:
    """The keyring key of a credential file's registry entry: no scheme, no ``/v1/`` or
    ``/v2/`` prefix, no lone ``/``."""
    value = location
    if not value.startswith(("https://", "http://")):
        value = "https://" + value
    value = value.split("://", 1)[1]
    url = parse_schemeless(value)
    hostport = value.split("/", 1)[0].rsplit("@", 1)[-1]
    path = url.path
    if path.startswith(("/v2/", "/v1/")):
        path = path[3:]
    return hostport + path if path and path != "/" else hostport


def is_default_registry_match(image: str) -> bool:
    """The image is pulled from Docker Hub (the kubelet's ``isDefaultRegistryMatch``)."""
    first, sep, _ = image.partition("/")
    if not first:
        return False
    if not sep or first in ("docker.io", DEFAULT_REGISTRY_HOST):
        return True
    return not any(c in first for c in ".:")


class Keyring:
    """Registry credentials indexed by key; see the module docstring."""

    def __init__(self) -> None:
        self._creds: dict[str, list[TrackedAuthConfig]] = {}
        self._index: list[str] = []

    def __bool__(self) -> bool:
        return bool(self._creds)

    def add(self, source: CredentialSource | None, config: DockerConfig) -> list[str]:
        """Add a credential file's entries; returns the entries skipped as invalid (by
        registry name)."""
        skipped: list[str] = []
        for location, entry in config.items():
            try:
                key = registry_key(location)
            except ValueError:
                skipped.append(location)
                continue
            auth = AuthConfig(username=entry.username, password=entry.password, email=entry.email)
            tracked = TrackedAuthConfig(auth=auth, source=source, hash=hash_auth_config(auth))
            self._creds.setdefault(key, []).append(tracked)
        self._index = sorted(self._creds, reverse=True)
        return skipped

    def lookup(self, image: str) -> list[TrackedAuthConfig]:
        """Every credential for ``image`` (a repository, without tag or digest), most
        specific key first."""
        found = [c for key in self._index if urls_match(key, image) for c in self._creds[key]]
        if found:
            return found
        if is_default_registry_match(image):
            return list(self._creds.get(DEFAULT_REGISTRY_HOST, ()))
        return []


def union(*lookups: Iterable[TrackedAuthConfig]) -> list[TrackedAuthConfig]:
    """The kubelet's ``UnionDockerKeyring``: each keyring's answers, in order."""
    return [c for found in lookups for c in found]
