"""The tracer reads the kernel's own listing (``nft -j list table``, captured from nft 1.0.6 on
kernel 6.18 after loading the proxy's rules) the same way it reads the fake."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from proxy_builders import EXTERNAL_CLIENT, NODE_IP, POD_CLIENT

from nodeagent.nft import Rule
from nodeagent.nft.listing import table_state
from nodeagent.proxy.tracer import TraceError, Tracer

LISTING = Path(__file__).parent / "data" / "ruleset-nft-1.0.6.json"


def kernel_tracer(**kw: object) -> Tracer:
    state = table_state(json.loads(LISTING.read_text()), family="ip", table="nodeagent")
    return Tracer(state, local_ips=[NODE_IP], **kw)  # type: ignore[arg-type]


def test_the_kernel_listing_traces_like_the_rules_that_were_loaded() -> None:
    t = kernel_tracer()

    web_external = t.trace(src=EXTERNAL_CLIENT, dst=NODE_IP, proto="tcp", dport=30080)
    web_pod = t.trace(src=POD_CLIENT, dst="198.51.100.10", proto="tcp", dport=80)
    empty = t.trace(src=POD_CLIENT, dst="10.96.0.11", proto="tcp", dport=80)

    assert web_external.endpoints == ["10.244.1.1:8080"]  # externalTrafficPolicy Local
    assert not web_external.masqueraded
    assert web_pod.endpoints == ["10.244.1.1:8080", "10.244.2.1:8080"]
    assert empty.verdicts == {"REJECT"}


def test_affinity_recorded_by_a_packet_is_followed_by_the_next_one() -> None:
    t = kernel_tracer(record=True)
    first = t.trace(src=POD_CLIENT, dst="10.96.0.12", proto="udp", dport=53)
    again = t.trace(src=POD_CLIENT, dst="10.96.0.12", proto="udp", dport=53)
    assert first.endpoints == again.endpoints == ["10.244.1.2:5353"]
    assert any("affinity" in step for step in again.outcomes[0].path)


def test_the_path_names_every_rule_that_fired() -> None:
    t = kernel_tracer()
    trace = t.trace(src=EXTERNAL_CLIENT, dst="10.96.0.10", proto="tcp", dport=80)
    text = trace.render()
    assert (
        "services: ip daddr . meta l4proto . th dport vmap @service-ips => goto cluster-2" in text
    )
    assert "ACCEPT -> 10.244.2.1:8080 (masqueraded)" in text


def test_rules_the_tracer_does_not_know_are_refused() -> None:
    t = kernel_tracer()
    state = t._table
    state.chains["services"].rules.insert(
        0, Rule(chain="services", rule="tcp flags syn limit rate 5/second")
    )
    with pytest.raises(TraceError, match="limit rate"):
        t.trace(src=POD_CLIENT, dst="10.96.0.10", proto="tcp", dport=80)
