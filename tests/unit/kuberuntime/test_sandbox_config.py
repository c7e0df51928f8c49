"""PodSandboxConfig from a pod: identity, labels, hostname, DNS, ports, logs, cgroup parent."""

from __future__ import annotations

import pytest

from cri_protos.runtime.v1 import api_pb2 as api
from nodeagent.kuberuntime.dns import PodDNSError, parse_resolv_conf, pod_dns
from nodeagent.kuberuntime.podsettings import CgroupDriver, PodRuntimeSettings, ResolvConf
from nodeagent.kuberuntime.sandbox import build_sandbox_config, pod_cgroup_parent
from nodeagent.podspec import Pod
from nodeagent.testing.pods import container, pod

UID = "1234-abcd"
HOST = ResolvConf(servers=("192.0.2.53",), searches=("corp.example",), options=("edns0",))
SETTINGS = PodRuntimeSettings(
    node_name="node-a",
    pod_logs_dir="/var/log/pods",
    cluster_dns=("10.96.0.10",),
    cluster_domain="cluster.local",
)


def build(
    p: Pod, settings: PodRuntimeSettings = SETTINGS, attempt: int = 0
) -> api.PodSandboxConfig:
    config, _ = build_sandbox_config(p, settings=settings, attempt=attempt, host_dns=HOST)
    return config


def test_identity_labels_annotations_hostname_and_log_directory() -> None:
    p = pod("web-0", namespace="shop", uid=UID, labels={"app": "web"}, annotations={"a": "b"})
    config = build(p, attempt=2)

    assert (config.metadata.name, config.metadata.namespace, config.metadata.uid) == (
        "web-0",
        "shop",
        UID,
    )
    assert config.metadata.attempt == 2
    assert dict(config.labels) == {
        "app": "web",
        "io.kubernetes.pod.name": "web-0",
        "io.kubernetes.pod.namespace": "shop",
        "io.kubernetes.pod.uid": UID,
    }
    assert dict(config.annotations) == {"a": "b"}
    assert config.hostname == "web-0"
    assert config.log_directory == f"/var/log/pods/shop_web-0_{UID}"


def test_cluster_first_dns_uses_cluster_dns_and_search_path() -> None:
    config = build(pod("web", namespace="shop"))
    assert list(config.dns_config.servers) == ["10.96.0.10"]
    assert list(config.dns_config.searches) == [
        "shop.svc.cluster.local",
        "svc.cluster.local",
        "cluster.local",
        "corp.example",
    ]
    assert list(config.dns_config.options) == ["ndots:5"]


def test_host_network_pod_gets_no_hostname_and_the_hosts_resolver() -> None:
    config = build(pod("web", hostNetwork=True))
    assert config.hostname == ""
    assert config.linux.security_context.namespace_options.network == api.NODE
    assert list(config.dns_config.servers) == ["192.0.2.53"]
    assert list(config.dns_config.options) == ["edns0"]


def test_cluster_first_without_cluster_dns_falls_back_to_default_with_a_warning() -> None:
    settings = PodRuntimeSettings(node_name="n")
    dns, warnings = pod_dns(pod("web"), settings=settings, host=HOST)
    assert list(dns.servers) == ["192.0.2.53"]
    assert warnings == [
        "kubelet does not have ClusterDNS IP configured and cannot create Pod using "
        '"ClusterFirst" policy. Falling back to "Default" policy.'
    ]


def test_dns_none_takes_only_the_pods_dns_config() -> None:
    p = pod(
        "web",
        dnsPolicy="None",
        dnsConfig={
            "nameservers": ["1.1.1.1"],
            "searches": ["a.example"],
            "options": [{"name": "ndots", "value": "2"}, {"name": "rotate"}],
        },
    )
    dns, _ = pod_dns(p, settings=SETTINGS, host=HOST)
    assert (list(dns.servers), list(dns.searches), list(dns.options)) == (
        ["1.1.1.1"],
        ["a.example"],
        ["ndots:2", "rotate"],
    )


def test_pod_dns_options_override_the_defaults_and_nameservers_are_capped_at_three() -> None:
    p = pod(
        "web",
        dnsConfig={
            "nameservers": ["1.1.1.1", "8.8.8.8", "9.9.9.9"],
            "options": [{"name": "ndots", "value": "1"}],
        },
    )
    dns, warnings = pod_dns(p, settings=SETTINGS, host=HOST)
    assert list(dns.servers) == ["10.96.0.10", "1.1.1.1", "8.8.8.8"]
    assert list(dns.options) == ["ndots:1"]
    assert warnings == [
        "Nameserver limits were exceeded, some nameservers have been omitted, the applied "
        "nameserver line is: 10.96.0.10 1.1.1.1 8.8.8.8"
    ]


def test_resolv_conf_parsing_keeps_the_last_search_line_and_all_options() -> None:
    text = "# c\nnameserver 1.1.1.1\nsearch a.example. b.example\nsearch c.example\n"
    text += "options ndots:2\noptions edns0 ; trailing\nnameserver 8.8.8.8 # x\n"
    assert parse_resolv_conf(text) == ResolvConf(
        servers=("1.1.1.1", "8.8.8.8"), searches=("c.example",), options=("ndots:2", "edns0")
    )


def test_hostname_subdomain_and_fqdn() -> None:
    p = pod("web", hostname="h", subdomain="s", setHostnameAsFQDN=True, namespace="ns")
    assert build(p).hostname == "h.s.ns.svc.cluster.local"
    long = pod("x" * 62 + "-abc")
    assert build(long).hostname == "x" * 62
    with pytest.raises(PodDNSError, match=r"FQDN .* is too long"):
        build(pod("web", hostname="h" * 60, subdomain="s", setHostnameAsFQDN=True))


def test_every_container_port_is_mapped_and_duplicate_names_skipped() -> None:
    p = pod(
        containers=[
            container(
                "a",
                ports=[
                    {"name": "http", "containerPort": 80, "hostPort": 8080, "protocol": "TCP"},
                    {"name": "http", "containerPort": 81, "protocol": "TCP"},
                    {"containerPort": 53, "protocol": "UDP", "hostIP": "127.0.0.1"},
                ],
            )
        ]
    )
    mappings = [
        (m.protocol, m.container_port, m.host_port, m.host_ip) for m in build(p).port_mappings
    ]
    assert mappings == [(api.TCP, 80, 8080, ""), (api.UDP, 53, 0, "127.0.0.1")]


GUARANTEED = {"cpu": "1", "memory": "1Gi"}


@pytest.mark.parametrize(
    ("driver", "resources", "expected"),
    [
        pytest.param("cgroupfs", {}, f"/kubepods/besteffort/pod{UID}", id="cgroupfs besteffort"),
        pytest.param(
            "cgroupfs",
            {"requests": {"cpu": "100m"}},
            f"/kubepods/burstable/pod{UID}",
            id="cgroupfs burstable",
        ),
        pytest.param(
            "cgroupfs",
            {"requests": GUARANTEED, "limits": GUARANTEED},
            f"/kubepods/pod{UID}",
            id="cgroupfs guaranteed sits under kubepods",
        ),
        pytest.param(
            "systemd",
            {"requests": {"cpu": "100m"}},
            "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1234_abcd.slice",
            id="systemd burstable escapes dashes",
        ),
        pytest.param(
            "systemd",
            {},
            "/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod1234_abcd.slice",
            id="systemd besteffort",
        ),
        pytest.param(
            "systemd",
            {"requests": GUARANTEED, "limits": GUARANTEED},
            "/kubepods.slice/kubepods-pod1234_abcd.slice",
            id="systemd guaranteed",
        ),
    ],
)
def test_cgroup_parent_in_the_qos_hierarchy(
    driver: CgroupDriver, resources: dict[str, dict[str, str]], expected: str
) -> None:
    p = pod(uid=UID, containers=[container("a", **{"resources": resources})])
    settings = PodRuntimeSettings(node_name="n", cgroup_driver=driver)
    assert pod_cgroup_parent(p, settings) == expected
    assert build(p, settings).linux.cgroup_parent == expected


def test_cgroup_root_prefixes_the_hierarchy() -> None:
    settings = PodRuntimeSettings(node_name="n", cgroup_root="/nodeagent-test")
    assert pod_cgroup_parent(pod(uid=UID), settings) == (
        f"/nodeagent-test/kubepods/besteffort/pod{UID}"
    )


def test_sandbox_security_context_namespaces_sysctls_and_groups() -> None:
    p = pod(
        shareProcessNamespace=True,
        hostIPC=True,
        securityContext={
            "runAsUser": 1000,
            "runAsGroup": 3000,
            "fsGroup": 2000,
            "supplementalGroups": [4000],
            "sysctls": [{"name": "net.ipv4.ip_unprivileged_port_start", "value": "0"}],
        },
        containers=[container("a", securityContext={"privileged": True})],
    )
    linux = build(p).linux
    sc = linux.security_context
    assert (sc.namespace_options.pid, sc.namespace_options.ipc) == (api.POD, api.NODE)
    assert (sc.run_as_user.value, sc.run_as_group.value) == (1000, 3000)
    assert list(sc.supplemental_groups) == [2000, 4000]  # fsGroup first
    assert sc.privileged is True
    assert sc.seccomp.profile_type == api.SecurityProfile.RuntimeDefault
    assert dict(linux.sysctls) == {"net.ipv4.ip_unprivileged_port_start": "0"}
