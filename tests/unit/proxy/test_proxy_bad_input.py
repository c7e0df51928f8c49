"""One bad Service or EndpointSlice never stalls the others: it is skipped with one
error naming it, the field and the value, and every other object is programmed; addresses reach
nft only in canonical form, read as Kubernetes reads them."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from proxy_builders import POD_CLIENT, Proxy, endpoint, endpoint_slice, service

from nodeagent.log.facade import record_fields
from nodeagent.proxy.validation import canonical_ip, service_problem, slice_problem

GOOD_IP, BAD_IP = "10.96.0.10", "10.96.0.66"


def script(p: Proxy) -> str:
    tx = p.nft["ip"].last_transaction
    assert tx is not None
    return str(tx)


def errors(caplog: pytest.LogCaptureFixture) -> list[tuple[str, dict[str, object]]]:
    return [
        (r.getMessage(), dict(record_fields(r)))
        for r in caplog.records
        if r.levelno == logging.ERROR and r.name == "nodeagent.proxy"
    ]


def with_spec(obj: dict[str, Any], **fields: object) -> dict[str, Any]:
    obj["spec"].update(fields)
    return obj


def with_port(obj: dict[str, Any], **fields: object) -> dict[str, Any]:
    obj["spec"]["ports"][0].update(fields)
    return obj


@pytest.mark.parametrize(
    ("bad", "field", "value"),
    [
        pytest.param(
            with_port(service("bad", BAD_IP), port=70000), "spec.ports[0].port", "70000",
            id="port out of range",
        ),
        pytest.param(
            with_port(service("bad", BAD_IP), port="http"), "spec.ports[0].port", "'http'",
            id="port not a number",
        ),
        pytest.param(
            with_port(service("bad", BAD_IP), name="ht\ntp"), "spec.ports[0].name", "'ht\\ntp'",
            id="newline in a port name",
        ),
        pytest.param(
            with_port(service("bad", BAD_IP), protocol="ICMP"), "spec.ports[0].protocol", "'ICMP'",
            id="unknown protocol",
        ),
        pytest.param(
            with_port(service("bad", BAD_IP, type_="NodePort"), nodePort=-5),
            "spec.ports[0].nodePort", "-5",
            id="negative node port",
        ),
        pytest.param(
            service("bad", BAD_IP, sessionAffinity="ClientIP",
                    sessionAffinityConfig={"clientIP": {"timeoutSeconds": -1}}),
            "spec.sessionAffinityConfig.clientIP.timeoutSeconds", "-1",
            id="negative affinity timeout",
        ),
        pytest.param(
            service("bad", BAD_IP, sessionAffinity="ClientIP",
                    sessionAffinityConfig={"clientIP": {"timeoutSeconds": 86401}}),
            "spec.sessionAffinityConfig.clientIP.timeoutSeconds", "86401",
            id="affinity timeout over a day",
        ),
        pytest.param(
            service("bad", "10.96.0.999"), "spec.clusterIP", "'10.96.0.999'",
            id="cluster IP not an address",
        ),
        pytest.param(
            service("bad", BAD_IP, clusterIPs=[BAD_IP, "10.96.0.67"]),
            "spec.clusterIPs[1]", "'10.96.0.67'",
            id="two cluster IPs of one family",
        ),
        pytest.param(
            service("bad", BAD_IP, externalIPs=["198.51.100.1\n"]),
            "spec.externalIPs[0]", "'198.51.100.1\\n'",
            id="newline after an external IP",
        ),
        pytest.param(
            service("bad", BAD_IP, type_="LoadBalancer",
                    status={"loadBalancer": {"ingress": [{"ip": "fe80::1%eth0"}]}}),
            "status.loadBalancer.ingress[0].ip", "'fe80::1%eth0'",
            id="load balancer IP with a zone",
        ),
        pytest.param(
            with_spec(service("bad", BAD_IP), ports="80"), "spec.ports", "'80'",
            id="ports not a list",
        ),
    ],
)  # fmt: skip
async def test_an_invalid_service_is_skipped_and_the_good_one_beside_it_is_programmed(
    bad: dict[str, Any], field: str, value: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="nodeagent.proxy")
    p = Proxy(
        services=[service("good", GOOD_IP), bad],
        slices=[
            endpoint_slice("good", [endpoint("10.244.1.1")]),
            endpoint_slice("bad", [endpoint("10.244.6.1")]),
        ],
    )

    assert await p.sync()

    assert GOOD_IP in script(p) and "default/good:http" in script(p)
    assert "default/bad" not in script(p) and BAD_IP not in script(p)
    assert p.trace(POD_CLIENT, GOOD_IP, 80).endpoints == ["10.244.1.1:8080"]
    [(message, fields)] = errors(caplog)
    assert message == "Invalid Service; skipping it"
    assert fields["service"] == "default/bad"
    assert (fields["field"], fields["value"]) == (field, value)


@pytest.mark.parametrize(
    ("bad", "field", "value"),
    [
        pytest.param(
            endpoint_slice("bad", [endpoint("10.244.6.1")], ports=[("http", 70000, "TCP")]),
            "ports[0].port", "70000", id="port out of range",
        ),
        pytest.param(
            endpoint_slice("bad", [endpoint("10.244.6.1")], ports=[("h\nttp", 8080, "TCP")]),
            "ports[0].name", "'h\\nttp'", id="newline in a port name",
        ),
        pytest.param(
            endpoint_slice("bad", [endpoint("10.244.6.1"), endpoint("10.244.6.x")]),
            "endpoints[1].addresses[0]", "'10.244.6.x'", id="address not an address",
        ),
        pytest.param(
            endpoint_slice("bad", [endpoint("10.244.6.1"), endpoint("10.244.6.2\n10.244.6.3")]),
            "endpoints[1].addresses[0]", "'10.244.6.2\\n10.244.6.3'",
            id="two addresses in one",
        ),
        pytest.param(
            endpoint_slice("bad", [endpoint("fd00::1")]),
            "endpoints[0].addresses[0]", "'fd00::1'", id="IPv6 address in an IPv4 slice",
        ),
        pytest.param(
            endpoint_slice("bad", [{"addresses": "10.244.6.1"}]),
            "endpoints[0].addresses", "'10.244.6.1'", id="addresses not a list",
        ),
    ],
)  # fmt: skip
async def test_an_invalid_endpointslice_is_skipped_and_the_good_one_beside_it_is_programmed(
    bad: dict[str, Any], field: str, value: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="nodeagent.proxy")
    p = Proxy(
        services=[service("good", GOOD_IP), service("bad", BAD_IP)],
        slices=[endpoint_slice("good", [endpoint("10.244.1.1")]), bad],
    )

    assert await p.sync()

    assert p.trace(POD_CLIENT, GOOD_IP, 80).endpoints == ["10.244.1.1:8080"]
    assert "10.244.6." not in script(p)
    assert p.trace(POD_CLIENT, BAD_IP, 80).verdicts == {"REJECT"}  # as without endpoints
    [(message, fields)] = errors(caplog)
    assert message == "Invalid EndpointSlice; skipping it"
    assert (fields["endpointslice"], fields["service"]) == ("default/bad-abc", "default/bad")
    assert (fields["field"], fields["value"]) == (field, value)


async def test_an_invalid_update_takes_the_service_away_until_it_is_fixed_and_logs_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="nodeagent.proxy")
    p = Proxy(
        services=[service("good", GOOD_IP), service("web", BAD_IP)],
        slices=[endpoint_slice("web", [endpoint("10.244.6.1")])],
    )
    assert await p.sync()
    assert p.trace(POD_CLIENT, BAD_IP, 80).endpoints == ["10.244.6.1:8080"]

    p.services.put(with_port(service("web", BAD_IP), port=0))
    assert await p.sync()
    assert await p.sync(full=True)

    assert BAD_IP not in p.dump() and GOOD_IP in p.dump()
    assert [f["field"] for _, f in errors(caplog)] == ["spec.ports[0].port"]

    p.services.put(service("web", BAD_IP))
    assert await p.sync()
    assert p.trace(POD_CLIENT, BAD_IP, 80).endpoints == ["10.244.6.1:8080"]


async def test_leading_zeros_are_decimal_and_reach_nft_canonical() -> None:
    p = Proxy(
        services=[service("web", "010.096.000.010", clusterIPs=["010.096.000.010"])],
        slices=[
            endpoint_slice("web", [endpoint("010.244.000.005"), endpoint("10.244.0.5")]),
        ],
    )

    assert await p.sync()

    text = script(p)
    assert "010." not in text and ".000." not in text
    assert "10.96.0.10 . tcp . 80" in text
    # the same endpoint written twice is one endpoint, at 10.244.0.5 (octal would be 8.244.0.5)
    assert p.trace(POD_CLIENT, "10.96.0.10", 80).endpoints == ["10.244.0.5:8080"]


@pytest.mark.parametrize(
    ("text", "canonical"),
    [
        ("010.244.000.005", "10.244.0.5"),
        ("10.244.0.5", "10.244.0.5"),
        ("FD00:0:0::0001", "fd00::1"),
        ("::ffff:010.1.2.3", "10.1.2.3"),
        ("fd00::10.1.2.3", "fd00::a01:203"),
        ("fe80::1%eth0", None),
        ("10.244.0", None),
        ("10.244.0.256", None),
        ("10.244.0.5 ", None),
        ("10.244.0.-5", None),
        ("\u0661\u0660.244.0.5", None),  # Arabic-Indic digits: digits to int(), not to Go
        ("", None),
        ("example.com", None),
    ],
)
def test_addresses_are_read_as_kubernetes_reads_them(text: str, canonical: str | None) -> None:
    assert canonical_ip(text) == canonical


def test_objects_of_the_wrong_shape_name_the_field() -> None:
    assert str(service_problem({"metadata": []})) == "metadata: must be an object: []"
    assert str(slice_problem({"metadata": {}, "addressType": "IPv4", "ports": {}})) == (
        "ports: must be a list: {}"
    )
    long = "x" * 500
    problem = service_problem(service("a", long))
    assert problem is not None and len(str(problem)) < 120
    assert str(problem).startswith("spec.clusterIP: must be a valid IP address: 'xxx")
    assert service_problem(service("ext", "", type_="ExternalName", ports=[])) is None
