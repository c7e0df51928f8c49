"""The docker client's credential files as pull secrets carry them.

``kubernetes.io/dockercfg`` holds the legacy ``.dockercfg`` form, a map of registry to entry;
``kubernetes.io/dockerconfigjson`` the ``.docker/config.json`` form, the same map under
``auths``. An entry has ``username``, ``password``, ``email`` or ``auth``
(``base64(username:password)``, padded or not), which wins over the first two. As Go's
``encoding/json`` does, object keys match field names case-insensitively, unknown keys and
``null`` values are ignored, and a value of the wrong type is an error. The errors name what
was wrong, never a credential.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final

ENTRY_TYPE: Final = "dockerConfigEntryWithAuth"
ENTRY_FIELDS: Final = ("username", "password", "email", "auth")


class DockerConfigError(ValueError):
    """A credential file that is not what the docker client writes."""


@dataclass(frozen=True, slots=True)
class DockerConfigEntry:
    username: str = ""
    password: str = field(default="", repr=False)
    email: str = ""

    def __repr__(self) -> str:
        return f"DockerConfigEntry(username={self.username!r}, password=<redacted>)"


DockerConfig = Mapping[str, DockerConfigEntry]
"""Registry (``host[:port][/path]``, with or without a scheme) -> its credentials."""


def _go_type(value: object) -> str:
    match value:
        case bool():
            return "bool"
        case int() | float():
            return "number"
        case str():
            return "string"
        case list():
            return "array"
        case dict():
            return "object"
    return "value"


def _field(obj: Mapping[str, object], name: str) -> object:
    """Go's case-insensitive field match: an exact key first, else any that folds to it."""
    if name in obj:
        return obj[name]
    for key, value in obj.items():
        if key.lower() == name.lower():
            return value
    return None


def decode_auth(text: str) -> tuple[str, str]:
    """``base64(username:password)`` -> (username, password), as the kubelet's
    ``decodeDockerConfigFieldAuth``: padded text is standard base64, unpadded raw."""
    try:
        if text.strip().endswith("="):
            decoded = base64.b64decode(text, validate=True)
        else:
            decoded = base64.b64decode(text + "=" * (-len(text) % 4), validate=True)
    except (binascii.Error, ValueError) as e:
        raise DockerConfigError("illegal base64 data in the auth field") from e
    username, sep, password = decoded.decode("utf-8", errors="replace").partition(":")
    if not sep:
        raise DockerConfigError(
            "unable to parse auth field, must be formatted as base64(username:password)"
        )
    return username, password


def parse_entry(value: object) -> DockerConfigEntry:
    if value is None:
        return DockerConfigEntry()
    if not isinstance(value, dict):
        raise DockerConfigError(
            f"json: cannot unmarshal {_go_type(value)} into Go value of type {ENTRY_TYPE}"
        )
    fields: dict[str, str] = {}
    for name in ENTRY_FIELDS:
        item = _field(value, name)
        if item is None:
            continue
        if not isinstance(item, str):
            raise DockerConfigError(
                f"json: cannot unmarshal {_go_type(item)} into Go struct field "
                f"{ENTRY_TYPE}.{name} of type string"
            )
        fields[name] = item
    username, password = fields.get("username", ""), fields.get("password", "")
    if fields.get("auth"):
        username, password = decode_auth(fields["auth"])
    return DockerConfigEntry(username=username, password=password, email=fields.get("email", ""))


def parse_dockercfg(value: object) -> dict[str, DockerConfigEntry]:
    """The ``.dockercfg`` map (already JSON-decoded) -> its entries."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise DockerConfigError(
            f"json: cannot unmarshal {_go_type(value)} into Go value of type "
            "credentialprovider.DockerConfig"
        )
    return {str(registry): parse_entry(entry) for registry, entry in value.items()}


def parse_dockerconfigjson(value: object) -> dict[str, DockerConfigEntry]:
    """The ``.docker/config.json`` document (already JSON-decoded) -> its ``auths``."""
    if not isinstance(value, dict):
        raise DockerConfigError(
            f"json: cannot unmarshal {_go_type(value)} into Go value of type "
            "credentialprovider.DockerConfigJSON"
        )
    auths = _field(value, "auths")
    if auths is not None and not isinstance(auths, dict):
        raise DockerConfigError(
            f"json: cannot unmarshal {_go_type(auths)} into Go struct field "
            "DockerConfigJSON.auths of type credentialprovider.DockerConfig"
        )
    return parse_dockercfg(auths)


def loads(data: bytes) -> object:
    """JSON bytes -> a value; a ``DockerConfigError`` that quotes no content otherwise."""
    try:
        return json.loads(data)
    except (ValueError, UnicodeDecodeError) as e:
        raise DockerConfigError("invalid JSON (not a docker credential file)") from e
