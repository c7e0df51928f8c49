"""``/metrics/cadvisor``: per-cgroup metrics with cAdvisor's names and labels.

One series per container cgroup (labels ``container``, ``id`` the cgroup path below the
mount, ``image``, ``name`` the runtime's container ID, ``namespace``, ``pod``), one per pod
cgroup (``container``, ``image`` and ``name`` empty) and one for the root cgroup ``id="/"``.
PSI totals are the kernel's microseconds turned into seconds: ``waiting`` is ``some``,
``stalled`` is ``full``. Rendered from a :class:`~nodeagent.stats.cgroup.TreeSample`; pure.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Final

from nodeagent.stats.cgroup import CgroupSample, TreeSample, relative


@dataclass(frozen=True, slots=True)
class Owner:
    """Who a cgroup belongs to, for the labels."""

    namespace: str = ""
    pod: str = ""
    container: str = ""
    image: str = ""
    name: str = ""


Getter = Callable[[CgroupSample], float | None]


def _psi(resource: str, line: str) -> Getter:
    def get(cg: CgroupSample) -> float | None:
        psi = cg.psi.get(resource)
        if psi is None:
            return None
        return (psi.some if line == "some" else psi.full).total / 1e6

    return get


def _cpu(key: str, scale: float) -> Getter:
    def get(cg: CgroupSample) -> float | None:
        v = cg.cpu.get(key)
        return None if v is None else v * scale

    return get


def _mem(key: str) -> Getter:
    def get(cg: CgroupSample) -> float | None:
        v = cg.memory.get(key)
        return None if v is None or cg.memory_current is None else float(v)

    return get


def _io(key: str) -> Getter:
    def get(cg: CgroupSample) -> float | None:
        v = cg.io.get(key)
        return None if v is None else float(v)

    return get


METRICS: Final[tuple[tuple[str, str, str, Getter], ...]] = (
    (
        "container_cpu_usage_seconds_total",
        "counter",
        "Cumulative cpu time consumed in seconds.",
        _cpu("usage_usec", 1e-6),
    ),
    (
        "container_cpu_user_seconds_total",
        "counter",
        "Cumulative user cpu time consumed in seconds.",
        _cpu("user_usec", 1e-6),
    ),
    (
        "container_cpu_system_seconds_total",
        "counter",
        "Cumulative system cpu time consumed in seconds.",
        _cpu("system_usec", 1e-6),
    ),
    (
        "container_cpu_cfs_periods_total",
        "counter",
        "Number of elapsed enforcement period intervals.",
        _cpu("nr_periods", 1.0),
    ),
    (
        "container_cpu_cfs_throttled_periods_total",
        "counter",
        "Number of throttled period intervals.",
        _cpu("nr_throttled", 1.0),
    ),
    (
        "container_cpu_cfs_throttled_seconds_total",
        "counter",
        "Total time duration the container has been throttled.",
        _cpu("throttled_usec", 1e-6),
    ),
    (
        "container_memory_usage_bytes",
        "gauge",
        "Current memory usage in bytes, including all memory regardless of when it was accessed",
        lambda cg: None if cg.memory_current is None else float(cg.memory_current),
    ),
    (
        "container_memory_working_set_bytes",
        "gauge",
        "Current working set in bytes.",
        lambda cg: None if cg.working_set is None else float(cg.working_set),
    ),
    ("container_memory_rss", "gauge", "Size of RSS in bytes.", _mem("anon")),
    ("container_memory_cache", "gauge", "Number of bytes of page cache memory.", _mem("file")),
    (
        "container_memory_mapped_file",
        "gauge",
        "Size of memory mapped files in bytes.",
        _mem("file_mapped"),
    ),
    (
        "container_spec_memory_limit_bytes",
        "gauge",
        "Memory limit for the container.",
        lambda cg: float(cg.memory_max or 0) if cg.memory_current is not None else None,
    ),
    (
        "container_fs_reads_bytes_total",
        "counter",
        "Cumulative count of bytes read",
        _io("rbytes"),
    ),
    (
        "container_fs_writes_bytes_total",
        "counter",
        "Cumulative count of bytes written",
        _io("wbytes"),
    ),
    (
        "container_processes",
        "gauge",
        "Number of processes running inside the container.",
        lambda cg: None if cg.pids_current is None else float(cg.pids_current),
    ),
    (
        "container_pressure_cpu_waiting_seconds_total",
        "counter",
        "Total time duration tasks in the container have waited due to CPU congestion.",
        _psi("cpu", "some"),
    ),
    (
        "container_pressure_cpu_stalled_seconds_total",
        "counter",
        "Total time duration no tasks in the container could make progress due to CPU congestion.",
        _psi("cpu", "full"),
    ),
    (
        "container_pressure_memory_waiting_seconds_total",
        "counter",
        "Total time duration tasks in the container have waited due to memory congestion.",
        _psi("memory", "some"),
    ),
    (
        "container_pressure_memory_stalled_seconds_total",
        "counter",
        "Total time duration no tasks in the container could make progress due to memory "
        "congestion.",
        _psi("memory", "full"),
    ),
    (
        "container_pressure_io_waiting_seconds_total",
        "counter",
        "Total time duration tasks in the container have waited due to IO congestion.",
        _psi("io", "some"),
    ),
    (
        "container_pressure_io_stalled_seconds_total",
        "counter",
        "Total time duration no tasks in the container could make progress due to IO congestion.",
        _psi("io", "full"),
    ),
)


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _labels(owner: Owner, cgroup_id: str) -> str:
    pairs = (
        ("container", owner.container),
        ("id", cgroup_id),
        ("image", owner.image),
        ("name", owner.name),
        ("namespace", owner.namespace),
        ("pod", owner.pod),
    )
    return "{" + ",".join(f'{k}="{_escape(v)}"' for k, v in pairs) + "}"


def _value(v: float) -> str:
    return str(int(v)) if v == int(v) and abs(v) < 1e15 else repr(v)


def series(
    tree: TreeSample, pods: Mapping[str, Owner], containers: Mapping[str, Owner]
) -> Iterable[tuple[CgroupSample, str, Owner]]:
    root_id = "/"
    yield tree.node, root_id, Owner()
    if tree.kubepods is not None:
        yield tree.kubepods, relative(tree.kubepods_path, _root(tree)), Owner()
    for uid, cg in tree.pods.items():
        owner = pods.get(uid)
        if owner is not None:
            yield cg, relative(tree.pod_paths[uid], _root(tree)), owner
    for cid, cg in tree.containers.items():
        owner = containers.get(cid)
        if owner is not None:
            yield cg, relative(tree.container_paths[cid], _root(tree)), owner


def _root(tree: TreeSample) -> str:
    path = tree.kubepods_path
    for name in ("/kubepods.slice", "/kubepods"):
        if path.endswith(name):
            return path[: -len(name)]
    return "/sys/fs/cgroup"


def render(
    tree: TreeSample,
    *,
    pods: Mapping[str, Owner],
    containers: Mapping[str, Owner],
    timestamp_ms: int,
) -> str:
    """``pods``: pod UID -> owner; ``containers``: container ID -> owner (cgroups nobody owns,
    such as a container already removed from the runtime, are left out)."""
    rows = list(series(tree, pods, containers))
    out: list[str] = []
    for name, kind, help_text, get in METRICS:
        lines = []
        for cg, cgroup_id, owner in rows:
            v = get(cg)
            if v is not None:
                lines.append(f"{name}{_labels(owner, cgroup_id)} {_value(v)} {timestamp_ms}")
        if lines:
            out.append(f"# HELP {name} {help_text}")
            out.append(f"# TYPE {name} {kind}")
            out.extend(lines)
    return "\n".join(out) + "\n" if out else ""
