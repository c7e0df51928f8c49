"""Keep the test clusters' address ranges on this machine: `unreachable` routes in the root netns.

Before a pod or service range is used, `unreachable <cidr>` goes into the main routing table.
More specific routes (the CNI bridge's node subnet) still win, so pods stay reachable, but any
other packet addressed into the range is refused locally instead of following the default route
out of the machine. Several users may need a range at once (xdist workers, a `make up`
cluster), so each holder leaves a lease file (`LEASES/<cidr>/<pid>`, counting how many times
that process holds the range: a test's private containerd inside a session that holds it too)
and the last live holder to release removes the route; leases of dead processes do not count,
so a killed session's route goes with the next release. An `unreachable` route the harness did
not make is left alone, and a range that is already routed somewhere else is refused outright.

The ranges come from `versions.env` (`CLUSTER_CIDR`, `SERVICE_CIDR`, `CLUSTER_DNS_IP`).
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import subprocess
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

from harness.versions import load_versions

_VERSIONS = load_versions()
POD_CIDR = _VERSIONS.cluster_cidr  # 10.244.0.0/16
NODE_POD_SUBNET = str(  # the first node's podCIDR, what the CNI bridge serves: 10.244.0.0/24
    next(ipaddress.ip_network(POD_CIDR).subnets(new_prefix=_VERSIONS.node_cidr_mask_size))
)
SERVICE_CIDR = _VERSIONS.service_cidr  # 10.96.0.0/16
CLUSTER_DNS = _VERSIONS.cluster_dns_ip  # 10.96.0.10, inside SERVICE_CIDR
OUR_DEVICE_PREFIX = "na-"  # bridges the harness creates; routes via them are expected
LEASES = Path("/run/nodeagent-harness/unreachable")  # <cidr>/<pid>: who still needs a route


class RouteConflict(RuntimeError):
    """The range is already routed on this machine by something the harness did not create."""


def _ip(*args: str) -> str:
    done = subprocess.run(["ip", *args], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)} failed: {done.stderr.strip()}")
    return done.stdout


def _routes_within(cidr: str) -> list[dict[str, str]]:
    routes: list[dict[str, str]] = json.loads(_ip("-j", "route", "show", "root", cidr) or "[]")
    return routes


def _normalise(cidr: str) -> str:
    return str(ipaddress.ip_network(cidr, strict=True))


def has_unreachable(cidr: str) -> bool:
    cidr = _normalise(cidr)
    return any(
        r.get("type") == "unreachable" and _normalise_dst(r["dst"]) == cidr
        for r in _routes_within(cidr)
    )


def _normalise_dst(dst: str) -> str:
    return str(ipaddress.ip_network(dst if "/" in dst else f"{dst}/32", strict=False))


def _lease_dir(cidr: str) -> Path:
    return LEASES / _normalise(cidr).replace("/", "_")


def _live_leases(cidr: str) -> list[int]:
    """Pids holding `cidr`; leases of dead processes (a killed session) are dropped."""
    live = []
    for lease in _lease_dir(cidr).glob("*"):
        if Path(f"/proc/{lease.name}").exists():
            live.append(int(lease.name))
        else:
            lease.unlink(missing_ok=True)
    return live


def hold_unreachable(cidr: str, *, holder: int | None = None) -> bool:
    """Make sure `unreachable <cidr>` exists while process `holder` (default: this one) lives.

    Returns False, and changes nothing, when the route exists but was not made by the harness.
    """
    cidr = _normalise(cidr)
    leases = _lease_dir(cidr)
    if has_unreachable(cidr) and not leases.is_dir():
        return False  # someone else's route: leave it alone
    if not has_unreachable(cidr):
        foreign = [
            r
            for r in _routes_within(cidr)
            if r.get("type") != "unreachable" and not r.get("dev", "").startswith(OUR_DEVICE_PREFIX)
        ]
        if foreign:
            raise RouteConflict(f"{cidr} is already routed on this machine: {foreign}")
        _ip("route", "add", "unreachable", cidr)
    leases.mkdir(parents=True, exist_ok=True)
    lease = leases / str(holder or os.getpid())
    lease.write_text(str(_holds(lease) + 1))  # one process may hold a range more than once
    return True


def _holds(lease: Path) -> int:
    try:
        return int(lease.read_text() or "1")
    except FileNotFoundError:
        return 0


def release_unreachable(cidr: str, *, holder: int | None = None) -> None:
    """Drop `holder`'s lease; the last holder out removes the route."""
    cidr = _normalise(cidr)
    if not _lease_dir(cidr).is_dir():
        return  # not a route the harness manages
    lease = _lease_dir(cidr) / str(holder or os.getpid())
    if (holds := _holds(lease)) > 1:
        lease.write_text(str(holds - 1))  # another hold of this process still needs it
        return
    lease.unlink(missing_ok=True)
    if _live_leases(cidr):
        return
    if has_unreachable(cidr):
        _ip("route", "del", "unreachable", cidr)
    for empty in (_lease_dir(cidr), LEASES, LEASES.parent):
        with contextlib.suppress(OSError):
            empty.rmdir()


@contextmanager
def unreachable_routes(cidrs: Iterable[str] = (POD_CIDR, SERVICE_CIDR)) -> Iterator[list[str]]:
    """Hold `unreachable` routes for `cidrs` for the block; yields the ranges it manages."""
    held: list[str] = []
    try:
        for cidr in cidrs:
            if hold_unreachable(cidr):
                held.append(_normalise(cidr))
        yield held
    finally:
        for cidr in reversed(held):
            release_unreachable(cidr)
