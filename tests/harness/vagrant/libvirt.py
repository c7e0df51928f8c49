"""libvirt on the test host, for `make vagrant-test`: started when no daemon runs, cleaned after.

The CI host has no systemd as PID 1, so nothing starts libvirtd on demand (no socket
activation). :func:`libvirt_host` starts ``virtlogd`` and ``libvirtd`` itself when
``qemu:///system`` does not answer, records the domains, networks, pools and volumes that exist,
and on exit (also on failure) removes whatever appeared since (a domain is destroyed and
undefined, a network destroyed and undefined, a volume deleted, a pool stopped and undefined —
its directory is left alone) and stops the daemons it started. A libvirtd that was already
running is left running.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from harness.hoststate import nft_tables, remove_libvirt_firewall

URI = "qemu:///system"
START_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 15.0


def virsh(*args: str, check: bool = True, timeout: float = 120.0) -> str:
    done = subprocess.run(
        ["virsh", "-q", "-c", URI, *args],
        capture_output=True, text=True, check=False, timeout=timeout,
    )  # fmt: skip
    if check and done.returncode != 0:
        raise RuntimeError(f"virsh {' '.join(args)}: exit {done.returncode}: {done.stderr.strip()}")
    return done.stdout


def responds() -> bool:
    try:
        return (
            subprocess.run(
                ["virsh", "-c", URI, "version"], capture_output=True, check=False, timeout=10
            ).returncode
            == 0
        )
    except subprocess.TimeoutExpired:
        return False


def _names(out: str) -> set[str]:
    return {line.strip() for line in out.splitlines() if line.strip()}


@dataclass(frozen=True)
class Inventory:
    domains: frozenset[str]
    networks: frozenset[str]
    pools: frozenset[str]
    volumes: frozenset[tuple[str, str]]  # (pool, volume)

    @staticmethod
    def take() -> Inventory:
        pools = _names(virsh("pool-list", "--all", "--name"))
        active = _names(virsh("pool-list", "--name"))
        volumes = set()
        for pool in active:
            for line in virsh("vol-list", pool).splitlines():
                if line.split():
                    volumes.add((pool, line.split()[0]))
        return Inventory(
            domains=frozenset(_names(virsh("list", "--all", "--name"))),
            networks=frozenset(_names(virsh("net-list", "--all", "--name"))),
            pools=frozenset(pools),
            volumes=frozenset(volumes),
        )


@dataclass
class LibvirtHost:
    run_dir: Path
    before: Inventory | None = None
    started: dict[str, int] = field(default_factory=dict)  # daemon name -> pid
    tables_before: set[str] | None = None  # nft tables before the test started libvirtd

    def new_since_start(self) -> Inventory:
        assert self.before is not None
        now = Inventory.take()
        return Inventory(
            domains=now.domains - self.before.domains,
            networks=now.networks - self.before.networks,
            pools=now.pools - self.before.pools,
            volumes=now.volumes - self.before.volumes,
        )

    def start(self) -> None:
        if not responds():
            self.tables_before = nft_tables()
            self.run_dir.mkdir(parents=True, exist_ok=True)
            for daemon in ("virtlogd", "libvirtd"):
                pid_file = self.run_dir / f"{daemon}.pid"
                pid_file.unlink(missing_ok=True)
                subprocess.run([daemon, "--daemon", "--pid-file", str(pid_file)], check=True)
                self.started[daemon] = _read_pid(pid_file)
            deadline = time.monotonic() + START_TIMEOUT_S
            while not responds():
                if time.monotonic() > deadline:
                    raise RuntimeError(f"libvirtd did not answer on {URI} in {START_TIMEOUT_S}s")
                time.sleep(0.5)
        self.before = Inventory.take()

    def clean(self) -> list[str]:
        """Remove what appeared since start; return what was removed (for the test's log)."""
        if self.before is None:
            return []
        new = self.new_since_start()
        removed = []
        for dom in sorted(new.domains):
            virsh("destroy", dom, check=False)
            virsh("undefine", dom, "--nvram", "--remove-all-storage", check=False)
            removed.append(f"domain {dom}")
        for pool, vol in sorted(new.volumes):
            virsh("vol-delete", "--pool", pool, vol, check=False)
            removed.append(f"volume {pool}/{vol}")
        for net in sorted(new.networks):
            virsh("net-destroy", net, check=False)
            virsh("net-undefine", net, check=False)
            removed.append(f"network {net}")
        for pool in sorted(new.pools):
            virsh("pool-destroy", pool, check=False)
            virsh("pool-undefine", pool, check=False)
            removed.append(f"pool {pool}")
        return removed

    def stop(self) -> None:
        for daemon in ("libvirtd", "virtlogd"):
            pid = self.started.pop(daemon, None)
            if pid is not None:
                _terminate(pid)
        if self.tables_before is not None:
            remove_libvirt_firewall(self.tables_before)
            self.tables_before = None

    def live_started_pids(self) -> list[int]:
        return [pid for pid in self.started.values() if is_alive(pid)]


@contextlib.contextmanager
def libvirt_host(run_dir: Path) -> Iterator[LibvirtHost]:
    host = LibvirtHost(run_dir=run_dir)
    try:
        host.start()
        yield host
    finally:
        try:
            host.clean()
        finally:
            host.stop()


def processes_matching(*needles: str) -> list[str]:
    """``pid cmdline`` of every process whose command line contains one of `needles`."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode().strip()
        except OSError:
            continue
        if any(needle in cmdline for needle in needles):
            found.append(f"{entry.name} {cmdline}")
    return found


def _read_pid(path: Path) -> int:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        with contextlib.suppress(FileNotFoundError, ValueError):
            return int(path.read_text().strip())
        time.sleep(0.1)
    raise RuntimeError(f"no pid in {path} after {START_TIMEOUT_S}s")


def is_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie is gone for our purposes (the daemon's parent reaps it).
    with contextlib.suppress(OSError):
        if " Z " in Path(f"/proc/{pid}/stat").read_text().split(")", 1)[1][:4]:
            return False
    return True


def _terminate(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + STOP_TIMEOUT_S
    while is_alive(pid) and time.monotonic() < deadline:
        time.sleep(0.2)
    if is_alive(pid):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
