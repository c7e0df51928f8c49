"""The Markdown configuration reference, generated from the schema (``docs/configuration.md``).

Every leaf field must carry a description (``Annotated[..., doc("...")]``); a missing one is
a ``ValueError`` here, so the reference test catches it. :func:`fields`, :func:`gates` and
:data:`RULES` give the same content as data, for the packages' manual page
(``packaging/manpage.py``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any

from msgspec import NODEFAULT, inspect

from nodeagent import yamlshape
from nodeagent.config import features, units, yamldoc
from nodeagent.config.flags import FLAGS
from nodeagent.config.problem import show
from nodeagent.config.schema import Config
from nodeagent.config.units import Duration

_HEADER = """\
# Configuration reference

<!-- Generated from nodeagent/config/schema*.py by `nodeagent config reference`.
     Do not edit by hand: run `nodeagent config reference > docs/configuration.md`. -->

nodeagent reads one YAML file, given with `--config` (the packages install
`/etc/nodeagent/config.yaml`), then applies the kubelet-compatible flags below on top of it.
Precedence: built-in defaults < file < flags. An empty file, or no file, means all defaults.

```yaml
apiVersion: nodeagent.io/v1alpha1
kind: NodeAgentConfiguration
node:          # the kubelet's flag-only settings
  kubeconfig: /etc/nodeagent/kubeconfig
kubelet:       # KubeletConfiguration field names and defaults
  cgroupDriver: systemd
proxy:         # kube-proxy (nftables mode) settings
  clusterCIDR: 10.244.0.0/16
```

`nodeagent config show [--config FILE] [flags]` prints the effective configuration with every
default; `nodeagent config validate` checks it (exit 0 when valid, 2 when not).

## The cluster's kubelet configuration

A cluster made by `kubeadm init` publishes the kubelet settings its nodes share (`clusterDNS`,
`clusterDomain`, `serverTLSBootstrap`, `rotateCertificates`, `cgroupDriver`, ...) as the
ConfigMap `kube-system/kubelet-config`, key `kubelet`. `nodeagent join` downloads it with the
bootstrap token, as `kubeadm join` does, and writes it to `<rootDir>/kubelet-config.yaml` (or
to `node.clusterKubeletConfig` if the file sets it) as a KubeletConfiguration
(`kubelet.config.k8s.io/v1beta1`), then names it with `--cluster-kubelet-config` in
`<rootDir>/join-flags.env`. The `--config` file is never written. Precedence with it:
built-in defaults < the cluster's kubelet configuration < the file's `kubelet:` section <
flags; mappings merge field by field, lists and values replace. So a field the file sets
(the packaged file sets `cgroupDriver`, `clusterDomain`, `rotateCertificates`, `failSwapOn`,
...) stays the node's own; delete it from the file to take the cluster's.

In that file, Go's unset values mean the default (a zero duration such as `syncFrequency: 0s`,
which kubeadm writes for every duration it leaves unset, an empty string, `null`), as the
kubelet's defaulting treats them. A field nodeagent does not implement is left out by the join
when it holds Go's zero value (`crashLoopBackOff: {}`), and left out with a warning naming it
and its value otherwise (the file's comment lists it); a file that still holds one is refused at
start. A ConfigMap that is not a valid KubeletConfiguration for this node stops the join with
an error naming the key, the line and the field, and nothing is written. A cluster that does
not publish the ConfigMap, or does not let bootstrap tokens read it (kubeadm's Role and
RoleBinding `kubeadm:kubelet-config`), is joined with the `--config` file alone and the join
says so: unlike a kubelet, which cannot start without kubeadm's `config.yaml`, nodeagent's own
file is a complete configuration (kubeadm stops the join there).

Value syntax:
- **duration**: Go/Kubernetes durations such as `300ms`, `10s`, `1m30s`, `2h` (units `ns`,
  `us`, `ms`, `s`, `m`, `h`). A bare number is an error. Shown back in Go's form (`1m0s`).
- **quantity**: Kubernetes quantities such as `100Mi`, `1Gi`, `500m`, `2`, `1e3`.
- **labels**: `key: value` with Kubernetes label syntax; keys in the `kubernetes.io` and
  `k8s.io` namespaces must be ones the kubelet may set (prefix `kubelet.kubernetes.io/` or
  `node.kubernetes.io/`, or `kubernetes.io/hostname`, `topology.kubernetes.io/zone`, ...).
- **paths** in the file must be absolute; relative paths on flags are taken from the
  current directory.

Errors name the field as written (`kubelet.shutdownGracePeriodByPodPriority[1].priority`), the
file and line, the bad value and what is allowed; a field set by a flag is named by the flag
(`--node-ip`). Unknown fields and fields written twice are errors. All value problems are
reported in one run; a wrong type or unknown field is reported on its own, first.
"""

RULES_TITLE = "Rules across fields"
RULES = """\
- `kubelet.shutdownGracePeriodCriticalPods` must be <= `kubelet.shutdownGracePeriod`; both are
  0 or at least 1s.
- `kubelet.shutdownGracePeriodByPodPriority` cannot be combined with `shutdownGracePeriod` or
  `shutdownGracePeriodCriticalPods`; its priorities must be unique.
- `kubelet.imageGCLowThresholdPercent` must be less than `imageGCHighThresholdPercent`; both
  0-100. `imageMaximumGCAge`, when not 0, must be greater than `imageMinimumGCAge`.
- `kubelet.nodeStatusReportFrequency` defaults to `nodeStatusUpdateFrequency` when only the
  latter is set (as in the kubelet).
- `kubelet.serializeImagePulls` defaults to false when `maxParallelImagePulls` > 1, and
  `maxParallelImagePulls` > 1 requires `serializeImagePulls: false`.
- `kubelet.memorySwap.swapBehavior: LimitedSwap` requires `kubelet.failSwapOn: false`. The Go
  kubelet accepts the combination but then either refuses to start (swap on) or never gives
  pods swap (swap off); nodeagent reports it as a configuration error instead.
- `kubelet.enforceNodeAllocatable` needs `cgroupsPerQOS: true` (or `[]`/`[none]`);
  `system-reserved` / `kube-reserved` need `systemReservedCgroup` / `kubeReservedCgroup` (the
  kubelet's error text otherwise). At start that cgroup must exist with the controllers its
  limits need, or the agent exits as the kubelet does ("Failed to enforce System Reserved
  Cgroup Limits on ..."); the reservation's cpu (as `cpu.weight`), memory (`memory.max`) and
  pid (`pids.max`) are written to it (systemd driver: the slice's unit properties too).
- `kubelet.failSwapOn: true` (the kubelet's default) refuses to start when `/proc/swaps` lists
  any swap, with the kubelet's message. The packaged `/etc/nodeagent/config.yaml` sets
  `failSwapOn: false` (as kubeadm configs do on nodes that keep swap): a node with a swap file
  starts, and pods still get none (`NoSwap`: `memory.swap.max` 0 for every container).
- `kubelet.qosReserved` (memory only, a percentage `0%`-`100%`) requires the alpha feature gate
  `QOSReserved` (the kubelet ignores it silently without the gate; nodeagent refuses). The
  Burstable tier's `memory.max` is then allocatable less that share of the Guaranteed pods'
  memory requests, BestEffort's that less the share of the Burstable pods' requests, updated
  as pods come and go.
- The PSI contention thresholds (`kubelet.systemMemoryContentionThreshold`, ...) are PSI
  percent, 0-100; they act only with the alpha feature gate `PSINodeCondition` (KEP-5394, off
  by default), which needs `KubeletPSI`.
- `kubelet.tlsCertFile` and `tlsPrivateKeyFile` are set together or not at all.
- `proxy.minSyncPeriod` must be <= `proxy.syncPeriod`.
- A non-empty file must have `apiVersion: nodeagent.io/v1alpha1` and
  `kind: NodeAgentConfiguration`.
"""


def _limits() -> str:
    """The input caps, from the constants that enforce them."""
    return f"""\
## Input limits

Checked before or while parsing, so a hostile or mistaken file gives one error line, quickly:

- `--config` must be a regular file (a FIFO, a device such as `/dev/zero` or a directory is
  refused unread) of at most {yamldoc.MAX_BYTES // 1024} KiB; it is read with a bounded read.
- Only tab, newline, carriage return and printable characters; a control character is an error
  naming its line and column.
- Nesting at most {yamldoc.MAX_DEPTH} levels deep, and at most {yamldoc.MAX_VALUES} values (keys
  count) as written and again once YAML aliases and merge keys are expanded, so "billion laughs"
  and merge-key chains are refused; an alias to a node that contains it is an error. A file
  within these caps parses in well under a second.
- Integers must fit in 64 bits; int32 fields (`maxPods`, `containerLogMaxFiles`,
  `logging.verbosity`, ...) at most 2147483647; `podPidsLimit` at most 4194304 (the kernel's
  PID limit).
- Durations and quantities take ASCII digits only and at most {units.MAX_TEXT} characters;
  quantities follow the Kubernetes grammar, with a magnitude of at most 2^63-1 (binary suffixes
  such as `8Ei` are capped there, as Kubernetes caps them).
- Error messages show at most the first 100 characters of a value. A file with none of the
  fields `apiVersion`, `kind`, `node`, `kubelet`, `proxy` is refused without echoing it.

The other YAML files the agent reads are bounded the same way before anything is built from
them (`nodeagent/yamlshape.py`): regular files only, read at most one byte past their cap,
nesting at most {yamlshape.MAX_DEPTH} levels, aliases adding at most
{yamlshape.MAX_ALIAS_NODES} nodes when expanded and never referring to themselves:

- a static pod manifest in `kubelet.staticPodPath`: at most
  {yamlshape.MAX_MANIFEST_BYTES // 1024} KiB (etcd's default request size: a bigger pod could
  never be stored as its mirror pod), only JSON values and string keys, parsed in a worker
  thread so the event loop never waits for it, and parsed again only when the file changes; a
  bad manifest is logged with its file and field and the others still run;
- a kubeconfig (`node.kubeconfig`, `node.bootstrapKubeconfig`): at most
  {yamlshape.MAX_KUBECONFIG_BYTES // 1024} KiB; a YAML error names its line and column, never
  the text (a bootstrap token).
"""


def reference() -> str:
    """The whole Markdown reference."""
    config = inspect.type_info(Config)
    assert isinstance(config, inspect.StructType)
    parts = [_HEADER, _limits(), _flags_table()]
    for f in config.fields:
        section = _unwrap(f.type)
        if isinstance(section, inspect.StructType):
            parts.append(_section(f.encode_name, section))
    parts.append(_gates_table())
    parts.append(f"## {RULES_TITLE}\n\n{RULES}")
    return "\n".join(parts)


@dataclasses.dataclass(frozen=True)
class Field:
    """One leaf of the configuration file, as the reference shows it (Markdown inline text)."""

    section: str
    path: str
    type: str
    default: str
    description: str
    flag: str | None


def fields() -> Iterator[Field]:
    """Every leaf field of the file, section by section, in schema order."""
    flag_of = {flag.path: flag.name for flag in FLAGS}
    config = inspect.type_info(Config)
    assert isinstance(config, inspect.StructType)
    for f in config.fields:
        section = _unwrap(f.type)
        if isinstance(section, inspect.StructType):
            for path, typ, default, text in _leaves(f.encode_name, section, struct_default=None):
                name = f.encode_name
                yield Field(name, path, _type_name(typ), default, text, flag_of.get(path))


def gates() -> dict[str, bool]:
    """The feature gates ``kubelet.featureGates`` accepts, with their defaults."""
    return dict(features.DEFAULTS)


def _flags_table() -> str:
    rows = ["## Command-line flags", "", "| Flag | Overrides | Value |", "|---|---|---|"]
    for flag in FLAGS:
        names = ", ".join(f"`{n}`" for n in flag.names)
        rows.append(f"| {names} | `{flag.path}` | `{flag.metavar}` |")
    rows.append("")
    rows.append(
        "`--register-node` alone means true; `--register-node=false` turns registration off. "
        "`--node-labels` and `--register-with-taints` may be repeated; `-v` takes `-v 2`, "
        "`-v=2` or `--v=2`. `nodeagent join` writes the flags it decided "
        "(`--bootstrap-kubeconfig`, `--hostname-override`, `--node-ip`) to "
        "`<rootDir>/join-flags.env`, which the systemd unit passes before `NODEAGENT_ARGS`."
    )
    return "\n".join(rows) + "\n"


def _gates_table() -> str:
    rows = ["## Feature gates (`kubelet.featureGates`)", "", "| Gate | Default |", "|---|---|"]
    rows += [f"| `{name}` | `{show(on, limit=10_000)}` |" for name, on in features.DEFAULTS.items()]
    return "\n".join(rows) + "\n\nAny other gate name is an error.\n"


def _section(name: str, struct: inspect.StructType) -> str:
    flag_of = {flag.path: flag.name for flag in FLAGS}
    rows = [f"## `{name}:`", "", "| Field | Type | Default | Description |", "|---|---|---|---|"]
    for path, typ, default, text in _leaves(name, struct, struct_default=None):
        flag = f" Flag: `{flag_of[path]}`." if path in flag_of else ""
        cells = (f"`{path}`", _type_name(typ), default, text + flag)
        rows.append("| " + " | ".join(_cell(c) for c in cells) + " |")
    return "\n".join(rows) + "\n"


def _leaves(
    prefix: str, struct: inspect.StructType, struct_default: Any
) -> Iterator[tuple[str, inspect.Type, str, str]]:
    for f in struct.fields:
        path = f"{prefix}.{f.encode_name}"
        typ = _unwrap(f.type)
        default = _default(f, struct_default)
        if isinstance(typ, inspect.StructType):
            yield from _leaves(path, typ, default)
            continue
        shown = "required" if f.required else f"`{show(default, limit=10_000)}`"
        yield path, typ, shown, _description(f)
        item = _unwrap(typ.item_type) if isinstance(typ, inspect.VarTupleType) else None
        if isinstance(item, inspect.StructType):
            yield from _leaves(f"{path}[]", item, struct_default=None)


def _default(f: inspect.Field, struct_default: Any) -> Any:
    if struct_default is not None:
        return getattr(struct_default, f.name)
    if f.default is not NODEFAULT:
        return f.default
    if f.default_factory is not NODEFAULT:
        return f.default_factory()
    return None


def _description(f: inspect.Field) -> str:
    if isinstance(f.type, inspect.Metadata) and f.type.extra_json_schema:
        text = f.type.extra_json_schema.get("description")
        if isinstance(text, str):
            return text
    raise ValueError(f"field {f.encode_name!r} has no description (use doc(...))")


def _unwrap(t: inspect.Type) -> inspect.Type:
    while isinstance(t, inspect.Metadata):
        t = t.type
    return t


def _type_name(t: inspect.Type) -> str:
    t = _unwrap(t)
    if isinstance(t, inspect.CustomType) and t.cls is Duration:
        return "duration"
    if isinstance(t, inspect.LiteralType):
        return " | ".join(f"`{v}`" for v in t.values)
    if isinstance(t, inspect.VarTupleType | inspect.ListType):
        return f"list of {_type_name(t.item_type)}"
    if isinstance(t, inspect.DictType):
        return f"map of {_type_name(t.key_type)} to {_type_name(t.value_type)}"
    if isinstance(t, inspect.UnionType):
        return " or ".join(_type_name(u) for u in t.types)
    if isinstance(t, inspect.StructType):
        return "object"
    names = {
        inspect.IntType: "integer",
        inspect.FloatType: "number",
        inspect.StrType: "string",
        inspect.BoolType: "boolean",
        inspect.NoneType: "null",
    }
    return names.get(type(t), type(t).__name__)


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")
