"""What the reference kubelet and kube-proxy change on the host outside their root dirs, and
putting it back: sysctls the kubelet's container manager sets, ``kubepods`` cgroups, the
``/var/log/containers`` directory, and the nft tables of its iptables-nft canaries and of
kube-proxy. Used by the benchmarks that run the kubelet and by ``make conformance PEER=kubelet``.

    before = HostState.snapshot()
    ... run the kubelet ...
    before.restore()
"""

from __future__ import annotations

import contextlib
import os
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup")
KERNEL_TUNABLES = (  # what the kubelet's container manager sets (setupKernelTunables)
    "vm/overcommit_memory",
    "vm/panic_on_oom",
    "kernel/panic",
    "kernel/panic_on_oops",
    "kernel/keys/root_maxkeys",
    "kernel/keys/root_maxbytes",
)
CONTAINER_LOGS = Path("/var/log/containers")  # hard-coded in the kubelet


def cgroup_hierarchies() -> list[Path]:
    return [p for p in CGROUP_ROOT.iterdir() if p.is_dir() and not p.is_symlink()]


def _kubepods() -> set[Path]:
    return {d for h in cgroup_hierarchies() for d in h.glob("kubepods*") if d.is_dir()}


def _read(path: Path) -> str | None:
    try:
        return path.read_text()
    except OSError:
        return None


@dataclass(kw_only=True)
class HostState:
    """What the kubelet may change outside its root dir, as found before it started."""

    sysctls: dict[str, str | None] = field(default_factory=dict)
    cgroups: set[Path] = field(default_factory=set)
    container_logs_existed: bool = True
    nft_tables: set[str] = field(default_factory=set)

    @classmethod
    def snapshot(cls) -> HostState:
        return cls(
            sysctls={k: _read(Path("/proc/sys") / k) for k in KERNEL_TUNABLES},
            cgroups=_kubepods(),
            container_logs_existed=CONTAINER_LOGS.exists(),
            nft_tables=nft_tables(),
        )

    def changes(self) -> list[str]:
        """What differs now (for the report)."""
        found = [
            f"sysctl {k}: {old and old.strip()} -> {(_read(Path('/proc/sys') / k) or '').strip()}"
            for k, old in self.sysctls.items()
            if _read(Path("/proc/sys") / k) != old
        ]
        found += [f"cgroup {d}" for d in sorted(_kubepods() - self.cgroups)]
        if not self.container_logs_existed and CONTAINER_LOGS.exists():
            found.append(f"directory {CONTAINER_LOGS}")
        found += [f"nft table {t}" for t in sorted(nft_tables() - self.nft_tables)]
        return found

    def restore(self) -> None:
        """Put the sysctls back, remove new kubepods cgroups (deepest first) and the log dir."""
        for key, old in self.sysctls.items():
            if old is not None and _read(Path("/proc/sys") / key) != old:
                with contextlib.suppress(OSError):
                    (Path("/proc/sys") / key).write_text(old)
        for top in sorted(_kubepods() - self.cgroups):
            for dirpath, _, _ in sorted(os.walk(top), key=lambda w: -w[0].count("/")):
                with contextlib.suppress(OSError):
                    os.rmdir(dirpath)
        if not self.container_logs_existed:
            with contextlib.suppress(OSError):
                CONTAINER_LOGS.rmdir()
        # The kubelet's iptables-nft canary and firewall chains (KUBE-KUBELET-CANARY,
        # KUBE-FIREWALL) live in tables it creates in the root namespace; a new table without
        # KUBE- chains is someone else's (kube-proxy's nftables mode names its own tables).
        for table in sorted(nft_tables() - self.nft_tables):
            listed = subprocess.run(
                ["nft", "list", "table", *table.split()],
                capture_output=True,
                text=True,
                check=False,
            )
            if "KUBE-" in listed.stdout or table.endswith(" kube-proxy"):
                subprocess.run(["nft", "delete", "table", *table.split()], check=False)


def nft_tables() -> set[str]:
    out = subprocess.run(["nft", "list", "tables"], capture_output=True, text=True, check=True)
    return {line.removeprefix("table ").strip() for line in out.stdout.splitlines() if line}


def remove_libvirt_firewall(tables_before: set[str]) -> list[str]:
    """libvirtd's network driver adds empty ``LIBVIRT_*`` chains, and jumps to them from the base
    chains, to the iptables(-nft) tables ``ip filter``, ``ip nat``, ... (creating the tables if
    needed) when it starts, and never removes them. Remove those chains and jumps; then drop
    each table that did not exist in `tables_before` and is left with nothing but empty base
    chains. Rules of anyone else in the same tables stay."""
    removed = []
    for table in sorted(nft_tables()):
        family_name = table.split()
        listing = _nft("-a", "list", "table", *family_name)
        chain = ""
        for line in listing.splitlines():
            words = line.split()
            if words[:1] == ["chain"]:
                chain = words[1]
            elif "jump LIBVIRT_" in line and "# handle" in line:
                handle = line.rsplit("# handle", 1)[1].strip()
                _nft("delete", "rule", *family_name, chain, "handle", handle)
        for line in _nft("list", "table", *family_name).splitlines():
            words = line.split()
            if words[:1] == ["chain"] and words[1].startswith("LIBVIRT_"):
                _nft("delete", "chain", *family_name, words[1])
                removed.append(f"{table} {words[1]}")
        if table not in tables_before and _only_empty_base_chains(
            _nft("list", "table", *family_name)
        ):
            _nft("delete", "table", *family_name)
            removed.append(table)
    return removed


def _only_empty_base_chains(listing: str) -> bool:
    """True when every chain in the table is a base chain (``type ... hook``) without rules."""
    lines = [line.split() for line in listing.splitlines() if line.strip()]
    for i, words in enumerate(lines):
        if words[0] == "chain":
            if i + 1 >= len(lines) or lines[i + 1][0] != "type":
                return False  # a regular chain: someone else's (a kubelet's canary, ...)
        elif words[0] not in {"table", "}", "type"}:
            return False  # a rule, a set, a map: someone else's
    return True


def _nft(*args: str) -> str:
    done = subprocess.run(["nft", *args], capture_output=True, text=True, check=False)
    return done.stdout
