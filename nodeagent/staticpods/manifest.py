"""A static pod manifest (one file) to the Pod the agent runs: pure functions.

:func:`static_pod` does what the kubelet's file source does (``pkg/kubelet/config/common.go``
``applyDefaults``, then validation):

- the UID is the md5 of ``host:<node>``, ``file:<path>`` and the pod itself (here: its
  canonical JSON), as 32 hex digits — so the same manifest keeps its UID across restarts and a
  changed manifest is a new pod;
- the name becomes ``<name>-<node name, lowercased>``, the namespace defaults to ``default``,
  ``spec.nodeName`` is this node, ``status.phase`` is ``Pending``;
- annotations ``kubernetes.io/config.hash: <uid>`` and ``kubernetes.io/config.source: file``
  (the file source adds ``kubernetes.io/config.seen``, the first time it saw this UID);
- a toleration ``{operator: Exists, effect: NoExecute}`` so node problems never evict it.

One difference from the kubelet, on purpose: a pod naming one of the built-in priority classes
(``system-node-critical``, ``system-cluster-critical``) without a ``priority`` gets that class's
value, so graceful node shutdown kills it last (the kubelet leaves it at 0: kubernetes#113940,
#133442). The Priority admission plugin accepts a mirror pod whose priority equals its class's.

A bad manifest raises :class:`ManifestError` naming the file, the field and what is wrong.
"""

from __future__ import annotations

import copy
import hashlib
import json
import re
from collections.abc import Callable, Mapping
from typing import Any, Final, NoReturn

import msgspec
import yaml

from nodeagent.config.syntax import check_dns_subdomain
from nodeagent.podspec import CONFIG_SOURCE_ANNOTATION, decode_pod

FILE_SOURCE: Final = "file"
CONFIG_HASH_ANNOTATION: Final = "kubernetes.io/config.hash"
CONFIG_SEEN_ANNOTATION: Final = "kubernetes.io/config.seen"
NO_EXECUTE_TOLERATION: Final = {"operator": "Exists", "effect": "NoExecute"}
SYSTEM_PRIORITY_CLASSES: Final = {
    "system-node-critical": 2_000_001_000,
    "system-cluster-critical": 2_000_000_000,
}
RESTART_POLICIES: Final = ("Always", "OnFailure", "Never")
_DNS_LABEL: Final = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_MSGSPEC_PATH: Final = re.compile(r"^(.*?)(?: - at `\$\.?(.*)`)?$", re.DOTALL)


class ManifestError(ValueError):
    """A manifest that cannot become a pod: ``str()`` is ``<path>: <field>: <message>``."""

    def __init__(self, path: str, field: str, message: str) -> None:
        self.path = path
        self.field = field
        self.message = message
        super().__init__(f"{path}: {field or '(document)'}: {message}")


class _Loader(yaml.SafeLoader):
    """YAML without implicit timestamps: ``2026-01-01`` stays a string, as in the JSON the
    kubelet converts YAML to."""


_Loader.yaml_implicit_resolvers = {
    key: [(tag, rx) for tag, rx in resolvers if tag != "tag:yaml.org,2002:timestamp"]
    for key, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}


def parse_manifest(data: bytes | str, *, path: str) -> dict[str, Any]:
    """The one YAML or JSON document in ``data``, which must be a mapping."""
    try:
        docs = [d for d in yaml.load_all(data, Loader=_Loader) if d is not None]
    except yaml.YAMLError as e:
        where = ""
        mark = getattr(e, "problem_mark", None)
        if mark is not None:
            where = f" at line {mark.line + 1}, column {mark.column + 1}"
        problem = getattr(e, "problem", None) or str(e)
        raise ManifestError(path, "", f"not valid YAML or JSON: {problem}{where}") from e
    if not docs:
        raise ManifestError(path, "", "empty manifest")
    if len(docs) > 1:
        raise ManifestError(path, "", f"one pod per file; found {len(docs)} documents")
    (doc,) = docs
    if not isinstance(doc, dict):
        raise ManifestError(path, "", f"must be a Pod object, got a {type(doc).__name__}")
    return doc


def pod_uid(manifest: Mapping[str, Any], *, path: str, node_name: str) -> str:
    """The static pod's UID: md5 over the node, the file and the pod, in hex."""
    hasher = hashlib.md5(usedforsecurity=False)
    hasher.update(f"host:{node_name}".encode())
    hasher.update(f"file:{path}".encode())
    canonical = json.dumps(manifest, sort_keys=True, separators=(",", ":"), default=str)
    hasher.update(canonical.encode())
    return hasher.hexdigest()


def static_pod(manifest: Mapping[str, Any], *, path: str, node_name: str) -> dict[str, Any]:
    """The pod object (API JSON) for one parsed manifest; raises :class:`ManifestError`."""
    _validate(manifest, path=path, node_name=node_name)
    uid = pod_uid(manifest, path=path, node_name=node_name)
    pod: dict[str, Any] = copy.deepcopy(dict(manifest))
    meta = pod.setdefault("metadata", {})
    spec = pod["spec"]
    meta["name"] = f"{meta['name']}-{node_name.lower()}"
    meta["namespace"] = meta.get("namespace") or "default"
    meta["uid"] = uid
    meta["annotations"] = {
        **(meta.get("annotations") or {}),
        CONFIG_HASH_ANNOTATION: uid,
        CONFIG_SOURCE_ANNOTATION: FILE_SOURCE,
    }
    spec["nodeName"] = node_name
    tolerations = list(spec.get("tolerations") or [])
    if NO_EXECUTE_TOLERATION not in tolerations:
        tolerations.append(dict(NO_EXECUTE_TOLERATION))
    spec["tolerations"] = tolerations
    class_priority = SYSTEM_PRIORITY_CLASSES.get(spec.get("priorityClassName") or "")
    if spec.get("priority") is None and class_priority is not None:
        spec["priority"] = class_priority
    pod["status"] = {"phase": "Pending"}
    try:
        decode_pod(pod)
    except msgspec.ValidationError as e:
        field, message = _msgspec_error(e)
        raise ManifestError(path, field, message) from e
    return pod


def _msgspec_error(e: msgspec.ValidationError) -> tuple[str, str]:
    m = _MSGSPEC_PATH.match(str(e))
    assert m is not None  # the pattern matches any text
    return (m.group(2) or "", m.group(1))


def _validate(manifest: Mapping[str, Any], *, path: str, node_name: str) -> None:
    def fail(field: str, message: str) -> NoReturn:
        raise ManifestError(path, field, message)

    if manifest.get("kind") != "Pod":
        fail("kind", f'Unsupported value: {json.dumps(manifest.get("kind"))}: must be "Pod"')
    if manifest.get("apiVersion") != "v1":
        fail(
            "apiVersion",
            f'Unsupported value: {json.dumps(manifest.get("apiVersion"))}: must be "v1"',
        )
    meta = manifest.get("metadata")
    if not isinstance(meta, dict):
        fail("metadata", "Required value")
    name = meta.get("name")
    if not name or not isinstance(name, str):
        fail("metadata.name", "Required value: name is required")
    generated = f"{name}-{node_name.lower()}"
    if problem := check_dns_subdomain(generated):
        fail("metadata.name", f"Invalid value: {json.dumps(generated)}: {problem}")
    namespace = meta.get("namespace")
    if namespace and (not isinstance(namespace, str) or not _DNS_LABEL.fullmatch(namespace)):
        fail("metadata.namespace", f"Invalid value: {json.dumps(namespace)}: not a DNS label")
    spec = manifest.get("spec")
    if not isinstance(spec, dict):
        fail("spec", "Required value")
    _validate_containers(spec, fail)
    policy = spec.get("restartPolicy", "Always")
    if policy not in RESTART_POLICIES:
        fail(
            "spec.restartPolicy",
            f"Unsupported value: {json.dumps(policy)}: supported values: "
            + ", ".join(f'"{p}"' for p in RESTART_POLICIES),
        )


def _validate_containers(spec: Mapping[str, Any], fail: Callable[[str, str], NoReturn]) -> None:
    containers = spec.get("containers")
    if not containers or not isinstance(containers, list):
        fail("spec.containers", "Required value: at least one container")
    seen: set[str] = set()
    for key in ("initContainers", "containers"):
        for i, c in enumerate(spec.get(key) or []):
            where = f"spec.{key}[{i}]"
            if not isinstance(c, dict):
                fail(where, "must be a container object")
            name = c.get("name")
            if not name:
                fail(f"{where}.name", "Required value")
            elif not isinstance(name, str) or not _DNS_LABEL.fullmatch(name):
                fail(f"{where}.name", f"Invalid value: {json.dumps(name)}: not a DNS label")
            elif name in seen:
                fail(f"{where}.name", f"Duplicate value: {json.dumps(name)}")
            seen.add(str(name))
            if not c.get("image"):
                fail(f"{where}.image", "Required value")
