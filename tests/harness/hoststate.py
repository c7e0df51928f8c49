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
import itertools
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
    nft_chains: set[str] = field(default_factory=set)

    @classmethod
    def snapshot(cls) -> HostState:
        return cls(
            sysctls={k: _read(Path("/proc/sys") / k) for k in KERNEL_TUNABLES},
            cgroups=_kubepods(),
            container_logs_existed=CONTAINER_LOGS.exists(),
            nft_tables=nft_tables(),
            nft_chains=nft_chains(),
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
        found += [
            f"nft chain {c}"
            for c in sorted(nft_chains() - self.nft_chains)
            if " ".join(c.split()[:2]) in self.nft_tables
        ]
        return found

    def restore(self) -> None:
        """Put the sysctls back, remove new kubepods cgroups (deepest first), the log dir and
        new KUBE- nft chains."""
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
        # KUBE-FIREWALL...) go into the iptables tables of the root namespace, which it creates
        # if need be; kube-proxy's nftables mode names tables of its own.
        for table in sorted(nft_tables() - self.nft_tables):
            if table.endswith(" kube-proxy"):
                subprocess.run(["nft", "delete", "table", *table.split()], check=False)
        remove_chains(("KUBE-",), tables_before=self.nft_tables, keep=self.nft_chains)


def nft_tables() -> set[str]:
    out = subprocess.run(["nft", "list", "tables"], capture_output=True, text=True, check=True)
    return {line.removeprefix("table ").strip() for line in out.stdout.splitlines() if line}


def nft_chains() -> set[str]:
    """Root-namespace nft chains as "family table chain" strings."""
    found, table = set(), ""
    for line in _nft("list", "chains").splitlines():
        words = line.split()
        if words[:1] == ["table"]:
            table = " ".join(words[1:3])
        elif words[:1] == ["chain"]:
            found.add(f"{table} {words[1]}")
    return found


def remove_chains(
    prefixes: tuple[str, ...], *, tables_before: set[str], keep: set[str] | None = None
) -> list[str]:
    """Remove every chain named with one of `prefixes` from the root namespace's nft tables,
    with the rules that jump or go to them; then drop each table that did not exist in
    `tables_before` and is left with nothing but empty base chains. Rules of anyone else in
    the same tables stay, and so do the chains in `keep` ("family table chain", as
    `nft_chains` gives them). What was removed, as "family table [chain]" strings.

    iptables-nft users leave such chains behind for good: libvirtd's network driver
    (``LIBVIRT_*``, added when it starts, never removed), the CNI portmap plugin
    (``CNI-HOSTPORT-*``, ``CNI-DN-*``: created on the first pod with a port, never removed),
    the kubelet's canaries (``KUBE-KUBELET-CANARY``, ``KUBE-FIREWALL``...)."""
    removed = []
    for table in sorted(nft_tables()):
        family_name = table.split()
        kept = {k.removeprefix(f"{table} ") for k in keep or set() if k.startswith(f"{table} ")}
        listing = _nft("-a", "list", "table", *family_name)
        jumps, chains = chains_to_remove(listing, prefixes, keep=kept)
        if not chains:
            continue
        for chain, handle in jumps:
            _nft("delete", "rule", *family_name, chain, "handle", handle)
        for chain in chains:
            _nft("flush", "chain", *family_name, chain)
        for chain in chains:
            _nft("delete", "chain", *family_name, chain)
            removed.append(f"{table} {chain}")
        if table not in tables_before and _only_empty_base_chains(
            _nft("list", "table", *family_name)
        ):
            _nft("delete", "table", *family_name)
            removed.append(table)
    return removed


def drop_empty_tables(tables: tuple[str, ...]) -> list[str]:
    """Delete each of `tables` ("family name") that holds nothing at all: no chain, set or
    map. The portmap plugin's teardown leaves such an ``ip6 nat`` behind (it clears its chains
    in both families, which makes iptables-nft create the table)."""
    dropped = []
    for table in tables:
        if table not in nft_tables():
            continue
        listing = _nft("list", "table", *table.split())
        words = [
            w for line in listing.splitlines() if not line.startswith("#") for w in line.split()
        ]
        if words == ["table", *table.split(), "{", "}"]:
            _nft("delete", "table", *table.split())
            dropped.append(table)
    return dropped


def remove_libvirt_firewall(tables_before: set[str]) -> list[str]:
    return remove_chains(("LIBVIRT_",), tables_before=tables_before)


def chains_to_remove(
    listing: str, prefixes: tuple[str, ...], *, keep: set[str] | frozenset[str] = frozenset()
) -> tuple[list[tuple[str, str]], list[str]]:
    """From an ``nft -a list table`` listing: the chains named with one of `prefixes` but not
    in `keep`, and the (chain, handle) of each rule that jumps or goes to one of them."""
    chains = [
        words[1]
        for words in map(str.split, listing.splitlines())
        if words[:1] == ["chain"] and words[1].startswith(prefixes) and words[1] not in keep
    ]
    jumps: list[tuple[str, str]] = []
    chain = ""
    for line in listing.splitlines():
        words = line.split()
        if words[:1] == ["chain"]:
            chain = words[1]
        elif "# handle" in line and any(
            verb in {"jump", "goto"} and target in chains
            for verb, target in itertools.pairwise(words)
        ):
            jumps.append((chain, line.rsplit("# handle", 1)[1].strip()))
    return jumps, chains


def _only_empty_base_chains(listing: str) -> bool:
    """True when every chain in the table is a base chain (``type ... hook``) without rules."""
    lines = [line.split() for line in listing.splitlines() if line.strip()]
    lines = [words for words in lines if not words[0].startswith("#")]  # iptables-nft's warning
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
