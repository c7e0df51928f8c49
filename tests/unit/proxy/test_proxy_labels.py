"""The labels by which kube-proxy (v1.36) leaves objects to someone else, and their watch selectors.

``service.kubernetes.io/service-proxy-name`` on a Service: another proxy owns it, none of its
rules are ours. ``service.kubernetes.io/headless`` on an EndpointSlice: its endpoints do not
count (the EndpointSlice controller marks a headless Service's slices so). The same label on a
Service means nothing to kube-proxy (its Service watch does not select on it and the controller
never copies it to the slices), so it means nothing here either.
"""

from __future__ import annotations

import asyncio
import datetime as dt
from collections.abc import AsyncIterator
from typing import Any

import pytest
from proxy_builders import POD_CLIENT, Proxy, endpoint, endpoint_slice, service

from nodeagent.apiserver import SERVICES, WatchCache
from nodeagent.proxy.api import ENDPOINTSLICES_ALL, proxied_slice
from nodeagent.proxy.model import ServiceName
from nodeagent.proxy.service import proxy_caches
from nodeagent.proxy.tracking import ServiceTracker
from nodeagent.testing.fake_apiserver import FakeApiServer

HEADLESS = "service.kubernetes.io/headless"
PROXY_NAME = "service.kubernetes.io/service-proxy-name"
WEB = ServiceName("default", "web")
IP = "10.96.0.10"
ENDPOINTS = ["10.244.1.1:8080", "10.244.1.2:8080"]


def labelled(obj: dict[str, Any], **labels: str) -> dict[str, Any]:
    meta = obj["metadata"]
    return {**obj, "metadata": {**meta, "labels": {**(meta.get("labels") or {}), **labels}}}


def web_slice(**labels: str) -> dict[str, Any]:
    eps = endpoint_slice("web", [endpoint("10.244.1.1"), endpoint("10.244.1.2")])
    return labelled(eps, **labels)


@pytest.mark.parametrize(
    ("labels", "counts"),
    [
        ({}, True),
        ({"endpointslice.kubernetes.io/managed-by": "e2e-test"}, True),
        ({HEADLESS: ""}, False),
        ({HEADLESS: "true"}, False),  # the key is what counts, as `!key` selects
        ({PROXY_NAME: "other"}, True),  # only on the Service
    ],
)
def test_only_the_headless_label_takes_a_slice_out(labels: dict[str, str], counts: bool) -> None:
    assert proxied_slice(web_slice(**labels)) is counts


def test_a_slice_without_labels_or_metadata_counts() -> None:
    assert proxied_slice({"metadata": {"labels": None}})
    assert proxied_slice({"metadata": "garbage"})
    assert proxied_slice({})


def test_the_tracker_drops_a_slice_when_it_gets_the_label_and_takes_it_back_without() -> None:
    t = ServiceTracker(now=lambda: dt.datetime(2026, 1, 1, tzinfo=dt.UTC))
    svc, eps = service("web", IP), web_slice()
    assert t.poll([svc], [eps]).services == {WEB}
    assert t.slices(WEB) == [eps]

    marked = web_slice(**{HEADLESS: ""})
    assert t.poll([svc], [marked]).services == {WEB}
    assert t.slices(WEB) == []

    unmarked = web_slice()
    assert t.poll([svc], [unmarked]).services == {WEB}
    assert t.slices(WEB) == [unmarked]


def test_a_slice_created_with_the_label_is_never_seen() -> None:
    t = ServiceTracker(now=lambda: dt.datetime(2026, 1, 1, tzinfo=dt.UTC))
    svc = service("web", IP)
    t.poll([svc], [])
    assert t.poll([svc], [web_slice(**{HEADLESS: ""})]).services == set()
    assert t.slices(WEB) == []


async def test_labelling_the_slice_headless_rejects_as_without_endpoints_until_unlabelled() -> None:
    p = Proxy(services=[service("web", IP)], slices=[web_slice()])
    assert await p.sync()
    assert p.trace(POD_CLIENT, IP, 80).endpoints == ENDPOINTS

    p.slices.put(web_slice(**{HEADLESS: ""}))
    assert await p.sync()
    assert p.trace(POD_CLIENT, IP, 80).verdicts == {"REJECT"}
    assert "10.244.1.1" not in p.dump()

    p.slices.put(web_slice())
    assert await p.sync()
    assert p.trace(POD_CLIENT, IP, 80).endpoints == ENDPOINTS


async def test_the_headless_label_on_a_service_changes_nothing() -> None:
    p = Proxy(services=[service("web", IP)], slices=[web_slice()])
    assert await p.sync()
    before = p.dump()

    p.services.put(labelled(service("web", IP), **{HEADLESS: ""}))
    assert await p.sync()

    assert p.trace(POD_CLIENT, IP, 80).endpoints == ENDPOINTS
    assert p.dump() == before


async def test_labelling_the_service_for_another_proxy_removes_it_until_unlabelled() -> None:
    p = Proxy(services=[service("web", IP)], slices=[web_slice()])
    assert await p.sync()
    before = p.dump()

    p.services.put(labelled(service("web", IP), **{PROXY_NAME: "foo-bar"}))
    assert await p.sync()
    assert IP not in p.dump()
    assert p.trace(POD_CLIENT, IP, 80).endpoints == []

    p.services.put(service("web", IP))
    assert await p.sync()
    assert p.trace(POD_CLIENT, IP, 80).endpoints == ENDPOINTS
    assert p.dump() == before


# --- the caches ask the apiserver for what kube-proxy asks ------------------------------


@pytest.fixture
async def server() -> FakeApiServer:
    s = FakeApiServer()
    s.seed(SERVICES, service("web", IP))
    s.seed(SERVICES, labelled(service("other", "10.96.0.11"), **{PROXY_NAME: "foo"}))
    s.seed(SERVICES, service("db", "None"))
    s.seed(ENDPOINTSLICES_ALL, web_slice())
    db = endpoint_slice("db", [endpoint("10.244.2.1")], name="db-abc")
    s.seed(ENDPOINTSLICES_ALL, labelled(db, **{HEADLESS: ""}))
    return s


@pytest.fixture
async def caches(server: FakeApiServer) -> AsyncIterator[tuple[WatchCache, WatchCache]]:
    services, slices = proxy_caches(server)
    tasks = [asyncio.create_task(c.run()) for c in (services, slices)]
    await services.wait_synced()
    await slices.wait_synced()
    yield services, slices
    for t in tasks:
        t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


def names(cache: WatchCache) -> list[str]:
    return sorted(o["metadata"]["name"] for o in cache.items())


def params(server: FakeApiServer, verb: str, resource: str) -> tuple[object, object]:
    (call,) = server.calls_to(verb, resource)
    return call.params["labelSelector"], call.params["fieldSelector"]


async def test_the_caches_select_as_kube_proxy(
    server: FakeApiServer, caches: tuple[WatchCache, WatchCache]
) -> None:
    services, slices = caches
    assert names(services) == ["web"]
    assert names(slices) == ["web-abc"]
    server.seed(SERVICES, service("api", "10.96.0.12"))  # seen: both watches are running
    server.seed(ENDPOINTSLICES_ALL, endpoint_slice("api", [endpoint("10.244.3.1")]))
    await asyncio.wait_for(services.wait_for(lambda c: names(c) == ["api", "web"]), 5)
    await asyncio.wait_for(slices.wait_for(lambda c: names(c) == ["api-abc", "web-abc"]), 5)

    for verb in ("list", "watch"):
        assert params(server, verb, "services") == (f"!{PROXY_NAME}", "spec.clusterIP!=None")
        assert params(server, verb, "endpointslices") == (f"!{HEADLESS}", None)


async def test_a_label_added_on_a_live_slice_takes_it_out_of_the_cache(
    server: FakeApiServer, caches: tuple[WatchCache, WatchCache]
) -> None:
    _, slices = caches

    def mark(obj: dict[str, Any]) -> None:
        obj["metadata"]["labels"][HEADLESS] = ""

    server.modify(ENDPOINTSLICES_ALL, "web-abc", mark, namespace="default")
    await asyncio.wait_for(slices.wait_for(lambda c: names(c) == []), 5)

    server.modify(
        ENDPOINTSLICES_ALL,
        "web-abc",
        lambda o: o["metadata"]["labels"].pop(HEADLESS),
        namespace="default",
    )
    await asyncio.wait_for(slices.wait_for(lambda c: names(c) == ["web-abc"]), 5)
