"""The credential provider plugin configuration: ``CredentialProviderConfig``
(``kubelet.config.k8s.io/v1``, ``v1beta1``, ``v1alpha1``) read from a file, or from every
``*.json``/``*.yaml``/``*.yml`` file of a directory in lexical order, and checked field by
field as the kubelet's ``validateCredentialProviderConfig``. Every problem found is reported
together, each with the file and the field path (``providers[0].matchImages``), the value,
and what is allowed.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Final

import yaml

from nodeagent.config.units import Duration
from nodeagent.credentialprovider.keyring import parse_schemeless
from nodeagent.credentialprovider.plugin.types import ProviderConfig, TokenAttributes

CONFIG_GROUP: Final = "kubelet.config.k8s.io"
CONFIG_VERSIONS: Final = ("v1", "v1beta1", "v1alpha1")
PLUGIN_API_VERSIONS: Final = (
    "credentialprovider.kubelet.k8s.io/v1",
    "credentialprovider.kubelet.k8s.io/v1alpha1",
    "credentialprovider.kubelet.k8s.io/v1beta1",
)
TOKEN_API_VERSION: Final = "credentialprovider.kubelet.k8s.io/v1"
CACHE_TYPES: Final = ("ServiceAccount", "Token")
MAX_CONFIG_BYTES: Final = 1 << 20
_PROVIDER_FIELDS: Final = frozenset(
    {"name", "matchImages", "defaultCacheDuration", "apiVersion", "args", "env", "tokenAttributes"}
)
_TOKEN_FIELDS: Final = frozenset(
    {
        "serviceAccountTokenAudience",
        "cacheType",
        "requireServiceAccount",
        "requiredServiceAccountAnnotationKeys",
        "optionalServiceAccountAnnotationKeys",
    }
)
_QUALIFIED_NAME: Final = re.compile(
    r"([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[a-z0-9]([-a-z0-9_.]*[a-z0-9])?"
)


class ProviderConfigError(ValueError):
    """The plugin configuration is wrong; ``problems`` lists each ``(where, message)``."""

    def __init__(self, problems: Sequence[tuple[str, str]]) -> None:
        self.problems = tuple(problems)
        super().__init__("; ".join(f"{where}: {message}" for where, message in self.problems))


def config_files(path: str) -> list[Path]:
    target = Path(path)
    if not target.is_dir():
        return [target]
    files = sorted(
        p for p in target.iterdir() if p.suffix in (".json", ".yaml", ".yml") and not p.is_dir()
    )
    if not files:
        raise ProviderConfigError([(path, "no configuration files found in directory")])
    return files


def _strs(value: object) -> tuple[str, ...] | None:
    if value is None:
        return ()
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return tuple(value)
    return None


class _Checker:
    def __init__(self, source: str) -> None:
        self.source = source
        self.problems: list[tuple[str, str]] = []

    def add(self, where: str, message: str) -> None:
        self.problems.append((f"{self.source}: {where}" if where else self.source, message))


def _token_attributes(
    raw: object, where: str, api_version: str, gates: Mapping[str, bool], out: _Checker
) -> TokenAttributes | None:
    if not isinstance(raw, dict):
        out.add(where, f"must be a mapping, got {raw!r}")
        return None
    for key in sorted(set(raw) - _TOKEN_FIELDS):
        out.add(f"{where}.{key}", "unknown field")
    if not gates.get("KubeletServiceAccountTokenForCredentialProviders", True):
        gate = "KubeletServiceAccountTokenForCredentialProviders"
        out.add(where, f"tokenAttributes is not supported when {gate} feature gate is disabled")
    audience = raw.get("serviceAccountTokenAudience")
    if not isinstance(audience, str) or not audience:
        out.add(f"{where}.serviceAccountTokenAudience", "Required value")
        audience = ""
    require = raw.get("requireServiceAccount")
    if not isinstance(require, bool):
        out.add(f"{where}.requireServiceAccount", "Required value (true or false)")
        require = True
    if api_version != TOKEN_API_VERSION:
        out.add(where, f"tokenAttributes is only supported for {TOKEN_API_VERSION} API version")
    keys: dict[str, tuple[str, ...]] = {}
    for name in ("requiredServiceAccountAnnotationKeys", "optionalServiceAccountAnnotationKeys"):
        values = _strs(raw.get(name))
        if values is None:
            out.add(f"{where}.{name}", "must be a list of strings")
            values = ()
        seen: set[str] = set()
        for key in values:
            if not _QUALIFIED_NAME.fullmatch(key.lower()) or len(key.split("/")[-1]) > 63:
                out.add(f"{where}.{name}", f"Invalid value: {key!r}: not a qualified name")
            if key in seen:
                out.add(f"{where}.{name}", f"Duplicate value: {key!r}")
            seen.add(key)
        keys[name] = values
    required = keys["requiredServiceAccountAnnotationKeys"]
    optional = keys["optionalServiceAccountAnnotationKeys"]
    if require is False and required:
        out.add(
            f"{where}.requiredServiceAccountAnnotationKeys",
            "requireServiceAccount cannot be false when requiredServiceAccountAnnotationKeys "
            "is set",
        )
    if both := sorted(set(required) & set(optional)):
        out.add(
            where, f"Invalid value: {both}: annotation keys cannot be both required and optional"
        )
    cache_type = raw.get("cacheType")
    if not cache_type:
        out.add(
            f"{where}.cacheType",
            "cacheType is required to be set when tokenAttributes is "
            f"specified. Supported values are: {', '.join(CACHE_TYPES)}",
        )
    elif cache_type not in CACHE_TYPES:
        out.add(
            f"{where}.cacheType",
            f'Unsupported value: "{cache_type}": supported values: '
            + ", ".join(f'"{t}"' for t in CACHE_TYPES),
        )
    return TokenAttributes(
        audience=audience,
        cache_type=str(cache_type or ""),
        require_service_account=require,
        required_annotation_keys=required,
        optional_annotation_keys=optional,
    )


def _provider(  # noqa: PLR0915 - one provider's fields, checked in the kubelet's order
    raw: object,
    index: int,
    *,
    bin_dir: str,
    gates: Mapping[str, bool],
    out: _Checker,
    seen: set[str],
) -> ProviderConfig | None:
    where = f"providers[{index}]"
    if not isinstance(raw, dict):
        out.add(where, f"must be a mapping, got {raw!r}")
        return None
    for key in sorted(set(raw) - _PROVIDER_FIELDS):
        out.add(f"{where}.{key}", "unknown field")
    name = raw.get("name")
    if not isinstance(name, str) or not name:
        out.add(f"{where}.name", "Required value")
        name = ""
    for bad, why in (
        ("/", "provider name cannot contain '/'"),
        (" ", "provider name cannot contain spaces"),
    ):
        if bad in name:
            out.add(f"{where}.name", f"Invalid value: {name!r}: {why}")
    if name in (".", ".."):
        out.add(f"{where}.name", f"Invalid value: {name!r}: provider name cannot be '{name}'")
    if name and name in seen:
        out.add(f"{where}.name", f"Duplicate value: {name!r}")
    seen.add(name)
    api_version = raw.get("apiVersion")
    if not api_version:
        out.add(f"{where}.apiVersion", "Required value")
    elif api_version not in PLUGIN_API_VERSIONS:
        out.add(
            f"{where}.apiVersion",
            f'Unsupported value: "{api_version}": supported values: '
            + ", ".join(f'"{v}"' for v in sorted(PLUGIN_API_VERSIONS)),
        )
    match_images = _strs(raw.get("matchImages"))
    if not match_images:
        out.add(
            f"{where}.matchImages", "Required value: at least 1 item in matchImages is required"
        )
        match_images = ()
    for image in match_images:
        try:
            parse_schemeless(image)
        except ValueError as e:
            out.add(
                f"{where}.matchImages", f"Invalid value: {image!r}: match image is invalid: {e}"
            )
    default_cache = 0.0
    text = raw.get("defaultCacheDuration")
    if text is None:
        out.add(f"{where}.defaultCacheDuration", "Required value")
    else:
        try:
            duration = Duration.parse(str(text))
        except ValueError as e:
            out.add(f"{where}.defaultCacheDuration", f"Invalid value: {text!r}: {e}")
        else:
            if duration.nanoseconds < 0:
                out.add(
                    f"{where}.defaultCacheDuration",
                    f"Invalid value: {text!r}: must be greater than or equal to 0",
                )
            default_cache = max(duration.seconds, 0.0)
    args = _strs(raw.get("args"))
    if args is None:
        out.add(f"{where}.args", "must be a list of strings")
        args = ()
    env: list[tuple[str, str]] = []
    for j, item in enumerate(raw.get("env") or ()):
        if not isinstance(item, dict) or not isinstance(item.get("name"), str):
            out.add(f"{where}.env[{j}]", "must be {name: ..., value: ...}")
            continue
        env.append((item["name"], str(item.get("value", ""))))
    tokens = None
    if raw.get("tokenAttributes") is not None:
        tokens = _token_attributes(
            raw["tokenAttributes"], f"{where}.tokenAttributes", str(api_version or ""), gates, out
        )
    binary = os.path.join(bin_dir, name)
    plain = name and "/" not in name and name not in (".", "..")
    if plain and not (os.path.isfile(binary) and os.access(binary, os.X_OK)):
        out.add(f"{where}.name", f"plugin binary executable {binary} did not exist")
    return ProviderConfig(
        name=name,
        binary=binary,
        match_images=match_images,
        default_cache_duration=default_cache,
        api_version=str(api_version or ""),
        args=args,
        env=tuple(env),
        token_attributes=tokens,
    )


def _document(path: Path, out: _Checker) -> list[Any]:
    try:
        with path.open("rb") as f:
            data = f.read(MAX_CONFIG_BYTES + 1)
    except OSError as e:
        out.add("", f"unable to read file: {e.strerror or e}")
        return []
    if len(data) > MAX_CONFIG_BYTES:
        out.add("", f"larger than {MAX_CONFIG_BYTES} bytes")
        return []
    try:
        doc = yaml.safe_load(data)
    except yaml.YAMLError as e:
        out.add("", f"not YAML or JSON: {e}")
        return []
    if not isinstance(doc, dict):
        out.add("", "must be a CredentialProviderConfig mapping")
        return []
    group, _, version = str(doc.get("apiVersion", "")).rpartition("/")
    if doc.get("kind") != "CredentialProviderConfig":
        out.add("kind", f"must be CredentialProviderConfig, got {doc.get('kind')!r}")
    if group != CONFIG_GROUP or version not in CONFIG_VERSIONS:
        out.add(
            "apiVersion",
            f"{doc.get('apiVersion')!r} is not one of "
            + ", ".join(f"{CONFIG_GROUP}/{v}" for v in CONFIG_VERSIONS),
        )
    for key in sorted(set(doc) - {"apiVersion", "kind", "providers"}):
        out.add(key, "unknown field")
    providers = doc.get("providers")
    if providers is None:
        return []
    if not isinstance(providers, list):
        out.add("providers", "must be a list")
        return []
    return providers


def load_providers(
    config_path: str, bin_dir: str, gates: Mapping[str, bool]
) -> tuple[ProviderConfig, ...]:
    """The providers of ``config_path`` (a file or a directory of them), each plugin found in
    ``bin_dir``; raises :class:`ProviderConfigError` listing every problem."""
    problems: list[tuple[str, str]] = []
    if not os.path.isdir(bin_dir):
        problems.append((bin_dir, "plugin binary directory did not exist"))
    if not os.path.exists(config_path):
        raise ProviderConfigError([*problems, (config_path, "unable to access path")])
    providers: list[ProviderConfig] = []
    seen: set[str] = set()
    count = 0
    for path in config_files(config_path):
        out = _Checker(str(path))
        for raw in _document(path, out):
            found = _provider(raw, count, bin_dir=bin_dir, gates=gates, out=out, seen=seen)
            count += 1
            if found is not None:
                providers.append(found)
        problems += out.problems
    if count == 0 and not problems:
        problems.append(
            (config_path, "providers: Required value: at least 1 item in plugins is required")
        )
    if problems:
        raise ProviderConfigError(problems)
    return tuple(providers)
