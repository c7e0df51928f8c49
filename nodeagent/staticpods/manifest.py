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

A bad manifest raises :class:`ManifestError` naming the file, the field and what is wrong:
before anything is built, the bounds of ``limits.py`` (size, nesting, alias expansion) and
JSON's types; then the fields of the pod, with the apiserver's wording, every quantity included.
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

from nodeagent.podspec import (
    CONFIG_SOURCE_ANNOTATION,
    PodSpecError,
    decode_checked_pod,
    dns1123_label_problem,
    dns1123_subdomain_problem,
    show_value,
)
from nodeagent.staticpods.limits import (
    MAX_MANIFEST_BYTES,
    ShapeError,
    check_json_values,
    check_yaml_shape,
)

FILE_SOURCE: Final = "file"
CONFIG_HASH_ANNOTATION: Final = "kubernetes.io/config.hash"
CONFIG_SEEN_ANNOTATION: Final = "kubernetes.io/config.seen"
NO_EXECUTE_TOLERATION: Final = {"operator": "Exists", "effect": "NoExecute"}
SYSTEM_PRIORITY_CLASSES: Final = {
    "system-node-critical": 2_000_001_000,
    "system-cluster-critical": 2_000_000_000,
}
RESTART_POLICIES: Final = ("Always", "OnFailure", "Never")
_MSGSPEC_PATH: Final = re.compile(r"^(.*?)(?: - at `\$\.?(.*)`)?$", re.DOTALL)


class ManifestError(ValueError):
    """A manifest that cannot become a pod: ``str()`` is ``<path>: <field>: <message>``."""

    def __init__(self, path: str, field: str, message: str) -> None:
        self.path = path
        self.field = field
        self.message = message
        super().__init__(f"{path}: {field or '(document)'}: {message}")


_BaseLoader: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml when present


class _Loader(_BaseLoader):  # type: ignore[misc]
    """YAML without implicit timestamps: ``2026-01-01`` stays a string, as in the JSON the
    kubelet converts YAML to."""


_Loader.yaml_implicit_resolvers = {
    key: [(tag, rx) for tag, rx in resolvers if tag != "tag:yaml.org,2002:timestamp"]
    for key, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}


def parse_manifest(data: bytes | str, *, path: str) -> dict[str, Any]:
    """The one YAML or JSON document in ``data``, which must be a mapping of JSON values.
    Blocking and CPU-bound for big files: callers on the event loop use a thread."""
    if len(data) > MAX_MANIFEST_BYTES:
        raise ManifestError(
            path, "", f"larger than {MAX_MANIFEST_BYTES} bytes; static pod manifests are capped"
        )
    try:
        check_yaml_shape(data)
        docs = [d for d in yaml.load_all(data, Loader=_Loader) if d is not None]
    except ShapeError as e:
        raise ManifestError(path, e.field, e.message) from e
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
    try:
        check_json_values(doc)
    except ShapeError as e:
        raise ManifestError(path, e.field, e.message) from e
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
    # The fields' types first, so the defaults below never meet a list where a map belongs.
    _decode({**manifest, "metadata": {**manifest["metadata"], "uid": ""}, "status": {}}, path=path)
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
    _decode(pod, path=path)
    return pod


def _decode(pod: dict[str, Any], *, path: str) -> None:
    try:
        decode_checked_pod(pod)
    except PodSpecError as e:
        raise ManifestError(path, e.field, e.message) from e
    except msgspec.ValidationError as e:
        field, message = _msgspec_error(e)
        raise ManifestError(path, field, message) from e


def _msgspec_error(e: msgspec.ValidationError) -> tuple[str, str]:
    m = _MSGSPEC_PATH.match(str(e))
    assert m is not None  # the pattern matches any text
    return (m.group(2) or "", m.group(1))


def _validate(manifest: Mapping[str, Any], *, path: str, node_name: str) -> None:
    def fail(field: str, message: str) -> NoReturn:
        raise ManifestError(path, field, message)

    if manifest.get("kind") != "Pod":
        fail("kind", f'Unsupported value: {show_value(manifest.get("kind"))}: must be "Pod"')
    if manifest.get("apiVersion") != "v1":
        fail(
            "apiVersion",
            f'Unsupported value: {show_value(manifest.get("apiVersion"))}: must be "v1"',
        )
    meta = manifest.get("metadata")
    if not isinstance(meta, dict):
        fail("metadata", "Required value")
    name = meta.get("name")
    if not name or not isinstance(name, str):
        fail("metadata.name", "Required value: name is required")
    generated = f"{name}-{node_name.lower()}"
    if problem := dns1123_subdomain_problem(generated):
        fail("metadata.name", f"Invalid value: {show_value(generated)}: {problem}")
    namespace = meta.get("namespace")
    if namespace and not isinstance(namespace, str):
        fail("metadata.namespace", f"Invalid value: {show_value(namespace)}: must be a string")
    if namespace and (problem := dns1123_label_problem(namespace)):
        fail("metadata.namespace", f"Invalid value: {show_value(namespace)}: {problem}")
    spec = manifest.get("spec")
    if not isinstance(spec, dict):
        fail("spec", "Required value")
    _validate_containers(spec, fail)
    policy = spec.get("restartPolicy", "Always")
    if policy not in RESTART_POLICIES:
        fail(
            "spec.restartPolicy",
            f"Unsupported value: {show_value(policy)}: supported values: "
            + ", ".join(f'"{p}"' for p in RESTART_POLICIES),
        )


def _validate_containers(spec: Mapping[str, Any], fail: Callable[[str, str], NoReturn]) -> None:
    containers = spec.get("containers")
    if not containers or not isinstance(containers, list):
        fail("spec.containers", "Required value: at least one container")
    init = spec.get("initContainers")
    if init is not None and not isinstance(init, list):
        fail("spec.initContainers", f"Invalid value: {show_value(init)}: must be a list")
    if spec.get("ephemeralContainers"):
        # The apiserver's ValidatePodCreate, which the kubelet applies to static pods too.
        fail("spec.ephemeralContainers", "Forbidden: cannot be set on create")
    seen: set[str] = set()
    for key in ("initContainers", "containers"):
        for i, c in enumerate(spec.get(key) or []):
            where = f"spec.{key}[{i}]"
            if not isinstance(c, dict):
                fail(where, "must be a container object")
            name = c.get("name")
            if not name:
                fail(f"{where}.name", "Required value")
            elif not isinstance(name, str):
                fail(f"{where}.name", f"Invalid value: {show_value(name)}: must be a string")
            elif problem := dns1123_label_problem(name):
                fail(f"{where}.name", f"Invalid value: {show_value(name)}: {problem}")
            elif name in seen:
                fail(f"{where}.name", f"Duplicate value: {show_value(name)}")
            seen.add(str(name))
            if not c.get("image"):
                fail(f"{where}.image", "Required value")
