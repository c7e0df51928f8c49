"""Which pod sysctls this node allows: the kubelet's sysctl admission rules. Pure.

A pod's ``spec.securityContext.sysctls`` may only name sysctls on the node's allowlist: the
*safe* ones (namespaced and isolated from other pods; some only on a kernel new enough to
namespace them) plus ``kubelet.allowedUnsafeSysctls``, names or prefixes ending in ``*``
(``kernel.shm*``) that must belong to a kernel namespace the pod gets its own of: IPC
(``kernel.sem``, ``kernel.shm*``, ``kernel.msg*``, ``fs.mqueue.*``) or network (``net.*``).
A pod that shares that namespace with the host (``hostIPC``, ``hostNetwork``) may not set its
sysctls. The kubelet refuses such a pod at admission: Failed, reason ``SysctlForbidden``,
message ``forbidden sysctl: "kernel.msgmax" not allowlisted``.

Names may be written with ``/`` as the separator (``net/ipv4/ip_forward``); they are compared,
and handed to the runtime, in the dotted form (:func:`normalize_name`, as runc wants them).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Final, Literal

from nodeagent.gotext import quote

FORBIDDEN_REASON: Final = "SysctlForbidden"
MAX_LENGTH: Final = 253

Namespace = Literal["IPC", "Net"]

# Safe sysctls, with the kernel release that first namespaced the ones that need one.
SAFE_SYSCTLS: Final[tuple[tuple[str, tuple[int, ...]], ...]] = (
    ("kernel.shm_rmid_forced", ()),
    ("net.ipv4.ip_local_port_range", ()),
    ("net.ipv4.tcp_syncookies", ()),
    ("net.ipv4.ping_group_range", ()),
    ("net.ipv4.ip_unprivileged_port_start", ()),
    ("net.ipv4.ip_local_reserved_ports", (3, 16)),
    ("net.ipv4.tcp_keepalive_time", (4, 5)),
    ("net.ipv4.tcp_fin_timeout", (4, 6)),
    ("net.ipv4.tcp_keepalive_intvl", (4, 5)),
    ("net.ipv4.tcp_keepalive_probes", (4, 5)),
    ("net.ipv4.tcp_rmem", (4, 15)),
    ("net.ipv4.tcp_wmem", (4, 15)),
)

_BY_NAME: Final[dict[str, Namespace]] = {
    "kernel.sem": "IPC",
    "kernel.shmall": "IPC",
    "kernel.shmmax": "IPC",
    "kernel.shmmni": "IPC",
    "kernel.shm_rmid_forced": "IPC",
    "kernel.shm": "IPC",  # the prefix of kernel.shm*
    "kernel.msgmax": "IPC",
    "kernel.msgmnb": "IPC",
    "kernel.msgmni": "IPC",
    "kernel.msg": "IPC",  # the prefix of kernel.msg*
}
_BY_PREFIX: Final[tuple[tuple[str, Namespace], ...]] = (("net.", "Net"), ("fs.mqueue.", "IPC"))

_SEGMENT: Final = r"[a-z0-9]([-_a-z0-9]*[a-z0-9])?"
_LAST_PATTERN_SEGMENT: Final = r"([a-z0-9][-_a-z0-9]*)?[a-z0-9*]"
PATTERN_REGEX: Final = rf"({_SEGMENT}[\./])*{_LAST_PATTERN_SEGMENT}"
_PATTERN: Final = re.compile(PATTERN_REGEX, re.ASCII)
_KERNEL: Final = re.compile(r"\s*v?([0-9]+(?:\.[0-9]+)+)", re.ASCII)


def normalize_name(name: str) -> str:
    """``net/ipv4/conf/eth0.100/rp_filter`` -> ``net.ipv4.conf.eth0/100.rp_filter``: when the
    first separator is a slash, slashes and dots swap (sysctl.d(5)); otherwise unchanged."""
    first = re.search(r"[./]", name)
    if first is None or first.group() == ".":
        return name
    return name.translate(str.maketrans("./", "/."))


def namespace_of(name: str) -> Namespace | None:
    """The kernel namespace a (dotted) sysctl or sysctl prefix belongs to, if known."""
    if name in _BY_NAME:
        return _BY_NAME[name]
    for prefix, namespace in _BY_PREFIX:
        if name.startswith(prefix):
            return namespace
    return None


def pattern_problem(pattern: str) -> str | None:
    """Why ``pattern`` (a sysctl or a prefix ending in ``*``) cannot be allowlisted, or None;
    the reason reads after the pattern (``"kernel.foo" is not known to be namespaced ...``)."""
    if len(pattern) > MAX_LENGTH or not _PATTERN.fullmatch(pattern):
        return f"must have at most {MAX_LENGTH} characters and match regex {PATTERN_REGEX}"
    name = normalize_name(pattern).partition("*")[0]
    if namespace_of(name) is None:
        return (
            "is not known to be namespaced: only kernel.sem, kernel.shm*, kernel.msg*, "
            "fs.mqueue.* and net.* sysctls can be allowed"
        )
    return None


def kernel_release_version(release: str) -> tuple[int, ...] | None:
    """``6.18.44-fc-v669`` -> (6, 18, 44); None when it does not start with ``X.Y``."""
    match = _KERNEL.match(release)
    if match is None or re.match(r"0[0-9]", match.group(1)):
        return None
    return tuple(int(part) for part in match.group(1).split("."))


def safe_sysctls(kernel_release: str) -> tuple[str, ...]:
    """The safe sysctls on a kernel of that release (``uname -r``). When it cannot be read,
    only those that need no particular kernel, as the kubelet does."""
    kernel = kernel_release_version(kernel_release)
    return tuple(
        name
        for name, since in SAFE_SYSCTLS
        if not since or (kernel is not None and kernel >= since)
    )


@dataclass(frozen=True, slots=True)
class Allowlist:
    """Sysctls and sysctl prefixes the node allows, each with its kernel namespace."""

    names: dict[str, Namespace] = field(default_factory=dict)
    prefixes: tuple[tuple[str, Namespace], ...] = ()

    @classmethod
    def build(cls, patterns: Iterable[str]) -> Allowlist:
        """Raises ``ValueError`` naming the first pattern that cannot be allowlisted."""
        names: dict[str, Namespace] = {}
        prefixes: dict[str, Namespace] = {}
        for pattern in patterns:
            problem = pattern_problem(pattern)
            if problem is not None:
                raise ValueError(f"sysctl {quote(pattern)} {problem}")
            name, star, _ = normalize_name(pattern).partition("*")
            namespace = namespace_of(name)
            assert namespace is not None  # pattern_problem checked it
            (prefixes if star else names)[name] = namespace
        return cls(names=names, prefixes=tuple(prefixes.items()))

    def problem(self, sysctl: str, *, host_network: bool, host_ipc: bool) -> str | None:
        """Why a pod (sharing the host's network / IPC namespace or not) may not set
        ``sysctl``, in the kubelet's words; None when it may."""
        name = normalize_name(sysctl)
        namespace = self.names.get(name)
        if namespace is None:
            namespace = next((ns for p, ns in self.prefixes if name.startswith(p)), None)
        if namespace is None:
            return f"{quote(name)} not allowlisted"
        if (namespace == "IPC" and host_ipc) or (namespace == "Net" and host_network):
            return f"{quote(name)} not allowed with host {namespace} enabled"
        return None


def node_allowlist(kernel_release: str, allowed_unsafe: Iterable[str]) -> Allowlist:
    """The kubelet's: the safe sysctls of this kernel plus ``allowedUnsafeSysctls``."""
    return Allowlist.build((*safe_sysctls(kernel_release), *allowed_unsafe))
