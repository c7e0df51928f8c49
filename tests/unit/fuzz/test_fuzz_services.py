"""Bounded fuzzing of the service proxy with malformed Services and EndpointSlices.

Each example puts one good Service (with its EndpointSlice) beside a Service and a slice of
which one field is replaced by a hostile value (out-of-range and non-integer numbers, text with
newlines, quotes and nft syntax, addresses with leading zeros or zones, wrong JSON types). The
sync must succeed, the good Service must be programmed and reach its endpoint, and, where
``nft`` can be run in a private network namespace (root), both families' scripts must pass
``nft --check``. The seed is fixed; ``NODEAGENT_FUZZ_EXAMPLES`` raises the example count for a
longer run by hand.
"""

from __future__ import annotations

import asyncio
import copy
import itertools
import os
import shutil
import subprocess
from collections.abc import Callable
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from unit.proxy.proxy_builders import POD_CLIENT, Proxy, endpoint, endpoint_slice, service

from nodeagent.proxy.manager import ProxyManager

EXAMPLES = int(os.environ.get("NODEAGENT_FUZZ_EXAMPLES", "120"))
GOOD, GOOD_IP, GOOD_ENDPOINT = "good-zq7", "10.96.0.10", "10.244.1.1"
NFT_CHECK = (
    ["unshare", "--net", "nft", "--check", "-f", "-"]
    if os.geteuid() == 0 and shutil.which("nft") and shutil.which("unshare")
    else None
)

HOSTILE_TEXT = [
    "", " ", "a\nb", 'a"b', "a;b", "a#b", "{", "}", "a,b", "\\", "\x00", "é" * 80, "x" * 300,
    "http", "HTTP", "-http", "TCP", "tcp", "ICMP", "None", "ClientIP", "Local", "Global",
    "010.244.000.005", "10.244.0.256", "10.244.0", "fe80::1%eth0", "::ffff:10.1.2.3",
    "FD00::0001", "fd00::1", "10.96.0.10", "10.244.1.1", "0.0.0.0", "1.2.3.4 ", "\u0661.2.3.4",
    "goto reject-chain", "} ; flush ruleset ; {", '" ; flush ruleset ; "',
]  # fmt: skip
HOSTILE = st.one_of(
    st.sampled_from(HOSTILE_TEXT),
    st.text(max_size=20),
    st.sampled_from([0, -1, 1, 65535, 65536, 70000, 86400, 86401, 2**63, -(2**63), 1.5]),
    st.integers(),
    st.booleans(),
    st.none(),
    st.just([]),
    st.just({}),
    st.lists(st.sampled_from(HOSTILE_TEXT), max_size=3),
    st.dictionaries(st.sampled_from(["ip", "ipMode", "clientIP", "timeoutSeconds"]),
                    st.sampled_from([*HOSTILE_TEXT, 0, -1, None]), max_size=2),
)  # fmt: skip

SERVICE_FIELDS = [
    ("metadata", "name"), ("metadata", "namespace"), ("metadata", "labels"), ("spec",),
    ("spec", "type"), ("spec", "clusterIP"), ("spec", "clusterIPs"), ("spec", "externalIPs"),
    ("spec", "ports"), ("spec", "ports", 0), ("spec", "ports", 0, "name"),
    ("spec", "ports", 0, "port"), ("spec", "ports", 0, "protocol"),
    ("spec", "ports", 0, "nodePort"),
    ("spec", "sessionAffinity"), ("spec", "sessionAffinityConfig"),
    ("spec", "sessionAffinityConfig", "clientIP"),
    ("spec", "sessionAffinityConfig", "clientIP", "timeoutSeconds"),
    ("spec", "externalTrafficPolicy"), ("spec", "internalTrafficPolicy"), ("status",),
    ("status", "loadBalancer", "ingress"), ("status", "loadBalancer", "ingress", 0, "ip"),
]  # fmt: skip
SLICE_FIELDS = [
    ("metadata",), ("metadata", "name"), ("metadata", "labels"),
    ("metadata", "labels", "kubernetes.io/service-name"), ("addressType",), ("ports",),
    ("ports", 0), ("ports", 0, "name"), ("ports", 0, "port"), ("ports", 0, "protocol"),
    ("endpoints",), ("endpoints", 0), ("endpoints", 0, "addresses"),
    ("endpoints", 0, "addresses", 0), ("endpoints", 0, "nodeName"),
    ("endpoints", 0, "conditions"), ("endpoints", 0, "conditions", "ready"),
]  # fmt: skip


def target_service() -> dict[str, Any]:
    obj = service(
        "target",
        "10.96.0.20",
        type_="LoadBalancer",
        ports=[("http", 80, "TCP"), ("dns", 53, "UDP")],
        node_ports={"http": 30080},
        clusterIPs=["10.96.0.20", "fd00:96::20"],
        externalIPs=["198.51.100.20"],
        sessionAffinity="ClientIP",
        sessionAffinityConfig={"clientIP": {"timeoutSeconds": 60}},
        status={"loadBalancer": {"ingress": [{"ip": "198.51.100.21"}]}},
    )
    return obj


def target_slice() -> dict[str, Any]:
    return endpoint_slice(
        "target", [endpoint("10.244.2.1"), endpoint("10.244.2.2")],
        ports=[("http", 8080, "TCP"), ("dns", 5353, "UDP")],
    )  # fmt: skip


def replaced(obj: dict[str, Any], path: tuple[str | int, ...], value: object) -> dict[str, Any]:
    """``obj`` with the field at ``path`` set to ``value`` (containers on the way made)."""
    out = copy.deepcopy(obj)
    node: Any = out
    for step, nxt in itertools.pairwise(path):
        child = node[step] if _has(node, step) else None
        if not isinstance(child, list if isinstance(nxt, int) else dict):
            child = [] if isinstance(nxt, int) else {}
            _set(node, step, child)
        node = child
    _set(node, path[-1], value)
    return out


def _has(node: Any, step: str | int) -> bool:
    return (isinstance(node, dict) and step in node) or (
        isinstance(node, list) and isinstance(step, int) and step < len(node)
    )


def _set(node: Any, step: str | int, value: object) -> None:
    if isinstance(node, list):
        assert isinstance(step, int)
        if step < len(node):
            node[step] = value
        else:
            node.append(value)
    else:
        node[step] = value


class ListStore:
    """A watch cache's read side over a plain list (FakeStore needs well-formed metadata)."""

    def __init__(self, objects: list[dict[str, Any]]) -> None:
        self.objects = objects
        self.version = 1

    @property
    def resource_version(self) -> str:
        return str(self.version)

    def items(self) -> list[dict[str, Any]]:
        return list(self.objects)

    async def wait_synced(self) -> None:
        return None

    async def wait_for(self, predicate: Callable[[Any], bool]) -> None:
        return None


async def synced(services: list[dict[str, Any]], slices: list[dict[str, Any]]) -> Proxy:
    """A proxy that did a full sync of these objects, then a partial one of the last Service
    replaced by a copy of itself."""
    p = Proxy(families=("ip", "ip6"))
    store = ListStore(services)
    p.manager = ProxyManager(
        # the fakes have the interfaces, not the declared types (as in proxy_builders.Proxy)
        settings=p.settings, services=store, slices=ListStore(slices), nft=p.nft,  # type: ignore[arg-type]
        conntrack=p.conntrack, clock=p.clock,
    )  # fmt: skip
    assert await p.sync(), "a sync with one malformed object failed"
    store.objects = [*services[:-1], copy.deepcopy(services[-1])]
    store.version += 1
    assert await p.sync(), "a partial sync with one malformed object failed"
    return p


def nft_check(script: str) -> None:
    assert NFT_CHECK is not None
    done = subprocess.run(
        NFT_CHECK, input=script, capture_output=True, text=True, timeout=10, check=False
    )
    assert done.returncode == 0, f"nft --check refused the rules: {done.stderr[:2000]}"


@settings(
    max_examples=EXAMPLES,
    derandomize=True,
    database=None,
    deadline=2000,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(
    service_edits=st.lists(st.tuples(st.sampled_from(SERVICE_FIELDS), HOSTILE), max_size=2),
    slice_edits=st.lists(st.tuples(st.sampled_from(SLICE_FIELDS), HOSTILE), max_size=2),
)
def test_a_malformed_service_never_stops_the_good_one(
    service_edits: list[tuple[tuple[str | int, ...], object]],
    slice_edits: list[tuple[tuple[str | int, ...], object]],
) -> None:
    bad_service, bad_slice = target_service(), target_slice()
    for path, value in service_edits:
        bad_service = replaced(bad_service, path, value)
    for path, value in slice_edits:
        bad_slice = replaced(bad_slice, path, value)
    services = [service(GOOD, GOOD_IP), bad_service]
    slices = [endpoint_slice(GOOD, [endpoint(GOOD_ENDPOINT)]), bad_slice]

    p = asyncio.run(synced(services, slices))

    assert p.trace(POD_CLIENT, GOOD_IP, 80).endpoints == [f"{GOOD_ENDPOINT}:8080"]
    assert f"default/{GOOD}:http" in p.dump()
    if NFT_CHECK is not None:
        full = [str(p.nft[f].transactions[0]) for f in ("ip", "ip6")]
        nft_check("".join(full))
