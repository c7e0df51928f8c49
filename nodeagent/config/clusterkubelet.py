"""The cluster's kubelet configuration: a KubeletConfiguration beneath the ``kubelet:`` section.

``kubeadm init`` publishes the kubelet settings every node of the cluster shares (cluster DNS,
serving-certificate bootstrap, authentication, ...) as the ConfigMap ``kube-system/kubelet-config``
(key ``kubelet``); ``kubeadm join`` writes it as the kubelet's ``config.yaml``. ``nodeagent join``
writes it as ``<rootDir>/kubelet-config.yaml`` and names it with ``--cluster-kubelet-config``
(``node.clusterKubeletConfig``), never into the operator's ``/etc/nodeagent/config.yaml``.

Precedence, lowest first: nodeagent's defaults, this file, the ``kubelet:`` section of
``--config``, the flags. Mappings merge field by field; a list or a value replaces the one
beneath it (as the kubelet merges its ``--config-dir`` drop-ins over ``--config``): the
operator's own file stays the last word on its node.

The file is read as the kubelet reads a v1beta1 KubeletConfiguration that Go wrote:

- ``apiVersion: kubelet.config.k8s.io/v1beta1`` and ``kind: KubeletConfiguration`` are required;
- Go's unset values are dropped, so nodeagent's defaults apply as the kubelet's defaulting
  would: a zero duration (``syncFrequency: 0s``, which kubeadm writes for every duration it
  leaves unset), an empty string (``containerRuntimeEndpoint: ""``) and ``null``;
- a field nodeagent does not implement (``cpuManagerPolicy``) is dropped when it holds Go's zero
  value (``0s``, ``0``, ``""``, ``{}``, ``[]``, ``null``, or a mapping of only those: kubeadm
  writes ``crashLoopBackOff: {}``); with any other value :func:`normalize` lists it in
  ``skipped``: ``nodeagent join`` leaves it out of the file it writes and says so, and a file
  that still holds one is refused when the agent starts.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any, Final

import yaml
from msgspec import inspect

from nodeagent.config import yamldoc
from nodeagent.config.problem import show
from nodeagent.config.schema_kubelet import KubeletConfiguration
from nodeagent.config.units import Duration
from nodeagent.errors import ConfigError

API_VERSION: Final = "kubelet.config.k8s.io/v1beta1"
KIND: Final = "KubeletConfiguration"
FIELD: Final = "node.clusterKubeletConfig"
FILE_NAME: Final = (
    "kubelet-config.yaml"  # under the root dir, as kubeadm's /var/lib/kubelet/config.yaml
)
_KEEP_EMPTY: Final = frozenset({"resolvConf"})  # a *string in v1beta1: "" means no resolver file


@dataclass(frozen=True)
class ClusterKubelet:
    """A KubeletConfiguration as nodeagent applies it."""

    data: dict[str, Any]  # the fields nodeagent applies, in kubelet: section form
    doc: yamldoc.Document  # where each field was written, for error lines
    skipped: tuple[tuple[str, object], ...] = field(default=())  # (path, value) not implemented

    @property
    def source(self) -> str:
        return self.doc.source


def parse(text: str, *, source: str) -> ClusterKubelet:
    """``text`` as a KubeletConfiguration; ``ConfigError`` naming ``source``, the field and the
    value when it is not one."""
    return _from(yamldoc.parse(text, source=source, top_fields=()))


def read(path: str, *, named_by: str = FIELD) -> ClusterKubelet:
    """The file ``path`` (``node.clusterKubeletConfig``); a field nodeagent does not implement
    is refused here: ``nodeagent join`` never writes one."""
    try:
        doc = yamldoc.read(path, top_fields=())
    except ConfigError as e:
        if e.path != "--config":
            raise
        raise ConfigError(named_by, e.message, path) from None
    cluster = _from(doc)
    if cluster.skipped:
        name, value = cluster.skipped[0]
        raise ConfigError(
            name,
            "nodeagent does not implement this kubelet field; remove it (`nodeagent join` "
            "leaves such fields out and names them)",
            value,
            source=path,
            line=doc.line_of(name),
        )
    return cluster


def _from(doc: yamldoc.Document) -> ClusterKubelet:
    raw = dict(doc.data)
    for name, expected in (("apiVersion", API_VERSION), ("kind", KIND)):
        got = raw.pop(name, None)
        if got != expected:
            problem = "required field is missing" if got is None else f"{show(got)} is not it"
            raise ConfigError(
                name,
                f"{problem}; must be {show(expected)}",
                got,
                source=doc.source,
                line=doc.line_of(name) or 1,
            )
    data, skipped = normalize(raw)
    return ClusterKubelet(data=data, doc=doc, skipped=skipped)


def normalize(raw: dict[str, Any]) -> tuple[dict[str, Any], tuple[tuple[str, object], ...]]:
    """(the fields nodeagent applies, the set fields it does not implement)."""
    skipped: list[tuple[str, object]] = []
    data = _walk(raw, _fields(KubeletConfiguration), "", skipped)
    return data, tuple(skipped)


def merge(base: dict[str, Any], section: object) -> object:
    """``section`` (the ``kubelet:`` of ``--config``) over ``base``: mappings merge field by
    field, anything else replaces. A section that is not a mapping is left for decoding to
    report."""
    if section is None:
        return copy.deepcopy(base)
    if not isinstance(section, dict):
        return section
    out = copy.deepcopy(base)
    for key, value in section.items():
        below = out.get(key)
        if isinstance(below, dict) and isinstance(value, dict):
            out[key] = merge(below, value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def render(cluster: ClusterKubelet, *, header: str) -> str:
    """The file ``nodeagent join`` writes: ``header`` as comments, then the document."""
    lines = [f"# {line}".rstrip() for line in header.splitlines()]
    if cluster.skipped:
        lines.append("# Left out (nodeagent does not implement them):")
        lines += [f"#   {name}: {show(value)}" for name, value in cluster.skipped]
    body = {"apiVersion": API_VERSION, "kind": KIND, **cluster.data}
    return "\n".join(lines) + "\n" + yaml.safe_dump(body, sort_keys=False, allow_unicode=True)


# --- the walk -----------------------------------------------------------------------------------

_Leaf = object()  # a field nodeagent takes whole (a scalar, a list, a free-form mapping)
_DurationLeaf = object()  # a Duration field: zero is Go's unset


def _fields(struct: type) -> dict[str, object]:
    """``{encoded name: nested fields | _Leaf | _DurationLeaf}`` of a msgspec Struct."""
    info = inspect.type_info(struct)
    assert isinstance(info, inspect.StructType)
    out: dict[str, object] = {}
    for f in info.fields:
        typ = f.type.type if isinstance(f.type, inspect.Metadata) else f.type
        if isinstance(typ, inspect.StructType):
            out[f.encode_name] = _fields(typ.cls)
        elif isinstance(typ, inspect.CustomType) and typ.cls is Duration:
            out[f.encode_name] = _DurationLeaf
        else:
            out[f.encode_name] = _Leaf
    return out


def _walk(
    raw: dict[str, Any], known: dict[str, object], prefix: str, skipped: list[tuple[str, object]]
) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in raw.items():
        path = f"{prefix}{key}"
        spec = known.get(key) if isinstance(key, str) else None
        if spec is None:
            if not _zero(value):
                skipped.append((path, value))
            continue
        if value is None or (value == "" and key not in _KEEP_EMPTY):
            continue
        if spec is _DurationLeaf and isinstance(value, str) and _zero_duration(value):
            continue
        if isinstance(spec, dict) and isinstance(value, dict):
            nested = _walk(value, spec, f"{path}.", skipped)
            if nested:
                out[key] = nested
            continue
        out[key] = value  # a wrong type is left for decoding to name
    return out


def _zero(value: object) -> bool:
    if value is None or value in ("", [], {}):
        return True
    if isinstance(value, bool):
        return False  # false is a choice (enableServer: false), not Go's omitted zero
    if isinstance(value, int | float):
        return value == 0
    if isinstance(value, str):
        return value == "0" or _zero_duration(value)
    if isinstance(value, dict):
        return all(_zero(v) for v in value.values())
    return False


def _zero_duration(text: str) -> bool:
    try:
        return Duration.parse(text).nanoseconds == 0
    except ValueError:
        return False
