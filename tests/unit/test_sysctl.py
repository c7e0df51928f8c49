"""The node's sysctl allowlist, as the kubelet builds and applies it (table tests)."""

from __future__ import annotations

import pytest

from nodeagent.sysctl import (
    SAFE_SYSCTLS,
    Allowlist,
    kernel_release_version,
    namespace_of,
    node_allowlist,
    normalize_name,
    pattern_problem,
    safe_sysctls,
)

LEGACY = (
    "kernel.shm_rmid_forced",
    "net.ipv4.ip_local_port_range",
    "net.ipv4.tcp_syncookies",
    "net.ipv4.ping_group_range",
    "net.ipv4.ip_unprivileged_port_start",
)


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        pytest.param("net.ipv4.ip_forward", "net.ipv4.ip_forward", id="dotted stays"),
        pytest.param("net/ipv4/ip_forward", "net.ipv4.ip_forward", id="slashes become dots"),
        pytest.param(
            "net/ipv4/conf/eno2.100/rp_filter",
            "net.ipv4.conf.eno2/100.rp_filter",
            id="a dot inside a slashed name becomes a slash",
        ),
        pytest.param(
            "net.ipv4.conf.eno2/100.rp_filter",
            "net.ipv4.conf.eno2/100.rp_filter",
            id="first separator a dot: unchanged",
        ),
        pytest.param("kernel", "kernel", id="no separator"),
        pytest.param("", "", id="empty"),
    ],
)
def test_normalize_name(name: str, expected: str) -> None:
    assert normalize_name(name) == expected


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("kernel.sem", "IPC"),
        ("kernel.shmmax", "IPC"),
        ("kernel.shm", "IPC"),
        ("kernel.msgmax", "IPC"),
        ("fs.mqueue.msg_max", "IPC"),
        ("fs.mqueue.", "IPC"),
        ("net.ipv4.ip_forward", "Net"),
        ("net.", "Net"),
        ("net", None),
        ("kernel.sh", None),
        ("kernel.panic", None),
        ("vm.overcommit_memory", None),
        ("fs.mqueue", None),
    ],
)
def test_namespace_of(name: str, expected: str | None) -> None:
    assert namespace_of(name) == expected


@pytest.mark.parametrize(
    ("release", "expected"),
    [
        pytest.param("6.18.44-fc-v669", (6, 18, 44), id="release with a suffix"),
        pytest.param("4.15", (4, 15), id="two components"),
        pytest.param("v5.10.0", (5, 10, 0), id="leading v"),
        pytest.param("6", None, id="one component"),
        pytest.param("06.1", None, id="zero-prefixed major"),
        pytest.param("", None, id="unreadable"),
    ],
)
def test_kernel_release_version(release: str, expected: tuple[int, ...] | None) -> None:
    assert kernel_release_version(release) == expected


@pytest.mark.parametrize(
    ("release", "expected"),
    [
        pytest.param("6.18.44-fc-v669", tuple(n for n, _ in SAFE_SYSCTLS), id="new kernel: all"),
        pytest.param(
            "4.5.0",
            (
                *LEGACY,
                "net.ipv4.ip_local_reserved_ports",
                "net.ipv4.tcp_keepalive_time",
                "net.ipv4.tcp_keepalive_intvl",
                "net.ipv4.tcp_keepalive_probes",
            ),
            id="4.5: keepalive yes, fin_timeout (4.6) and rmem/wmem (4.15) not yet",
        ),
        pytest.param("3.10.0-1160", LEGACY, id="3.10: none of the newer ones"),
        pytest.param("garbage", LEGACY, id="unknown kernel: only those without a minimum"),
    ],
)
def test_safe_sysctls_depend_on_the_kernel(release: str, expected: tuple[str, ...]) -> None:
    assert safe_sysctls(release) == expected


@pytest.mark.parametrize(
    ("pattern", "problem"),
    [
        pytest.param("kernel.msg*", None, id="IPC prefix"),
        pytest.param("kernel.shm*", None, id="shm prefix"),
        pytest.param("kernel.sem", None, id="kernel.sem"),
        pytest.param("net.*", None, id="every net sysctl"),
        pytest.param("net.ipv4.ip_forward", None, id="one net sysctl"),
        pytest.param("fs.mqueue.*", None, id="mqueue"),
        pytest.param("net/ipv4/ip_forward", None, id="slashes"),
        pytest.param("kernel.panic", "is not known to be namespaced", id="host-wide sysctl"),
        pytest.param("kernel.sh*", "is not known to be namespaced", id="prefix too short"),
        pytest.param("*", "is not known to be namespaced", id="everything"),
        pytest.param("net.*.forwarding", "must have at most 253", id="star inside"),
        pytest.param("Net.ipv4", "must have at most 253", id="upper case"),
        pytest.param("net..x", "must have at most 253", id="empty segment"),
        pytest.param("net." + "a" * 250, "must have at most 253", id="too long"),
    ],
)
def test_pattern_problem(pattern: str, problem: str | None) -> None:
    found = pattern_problem(pattern)
    assert (found is None) if problem is None else (found is not None and problem in found)


def test_build_names_the_first_pattern_it_refuses() -> None:
    with pytest.raises(ValueError, match=r'^sysctl "kernel\.panic" is not known to be namespaced'):
        Allowlist.build(["net.*", "kernel.panic", "vm.swappiness"])


ALLOWLIST = node_allowlist("6.1.0", ["kernel.msg*", "net.ipv4.ip_forward", "fs.mqueue.*"])


@pytest.mark.parametrize(
    ("name", "host_network", "host_ipc", "problem"),
    [
        pytest.param("kernel.shm_rmid_forced", False, False, None, id="safe"),
        pytest.param("net.ipv4.tcp_rmem", False, False, None, id="safe on a new kernel"),
        pytest.param("kernel.msgmax", False, False, None, id="allowed by a prefix"),
        pytest.param("net.ipv4.ip_forward", False, False, None, id="allowed by name"),
        pytest.param("net/ipv4/ip_forward", False, False, None, id="allowed, written with slashes"),
        pytest.param(
            "kernel.shmmax", False, False, '"kernel.shmmax" not allowlisted', id="not allowed"
        ),
        pytest.param(
            "net.core.somaxconn",
            False,
            False,
            '"net.core.somaxconn" not allowlisted',
            id="another net sysctl",
        ),
        pytest.param(
            "net.ipv4.ip_local_port_range",
            True,
            False,
            '"net.ipv4.ip_local_port_range" not allowed with host Net enabled',
            id="safe net sysctl with hostNetwork",
        ),
        pytest.param(
            "kernel.shm_rmid_forced",
            False,
            True,
            '"kernel.shm_rmid_forced" not allowed with host IPC enabled',
            id="safe ipc sysctl with hostIPC",
        ),
        pytest.param(
            "fs.mqueue.msg_max",
            False,
            True,
            '"fs.mqueue.msg_max" not allowed with host IPC enabled',
            id="prefix-allowed ipc sysctl with hostIPC",
        ),
        pytest.param("kernel.msgmax", True, False, None, id="ipc sysctl with hostNetwork"),
        pytest.param(
            "net/core/somaxconn",
            False,
            False,
            '"net.core.somaxconn" not allowlisted',
            id="the message names the dotted form",
        ),
    ],
)
def test_allowlist_problem(name: str, host_network: bool, host_ipc: bool, problem: str) -> None:
    assert ALLOWLIST.problem(name, host_network=host_network, host_ipc=host_ipc) == problem


def test_unknown_kernel_drops_the_newer_safe_sysctls() -> None:
    old = node_allowlist("", [])
    assert old.problem("kernel.shm_rmid_forced", host_network=False, host_ipc=False) is None
    assert (
        old.problem("net.ipv4.tcp_keepalive_time", host_network=False, host_ipc=False)
        == '"net.ipv4.tcp_keepalive_time" not allowlisted'
    )
