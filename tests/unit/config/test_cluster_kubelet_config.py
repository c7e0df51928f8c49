"""The cluster's kubelet configuration (`node.clusterKubeletConfig`): read as the kubelet reads a
KubeletConfiguration Go wrote, applied beneath the file's `kubelet:` section and the flags."""

from __future__ import annotations

from pathlib import Path

import pytest
from config_loading import HEADER, parse_flags

from nodeagent import config
from nodeagent.config import clusterkubelet
from nodeagent.config.units import Duration
from nodeagent.errors import ConfigError

KUBELET_HEADER = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"

# What `kubeadm init` of the pinned version publishes with its defaults (durations it leaves
# unset are written as 0s, empty structs as {}), plus two of a cluster's own settings.
KUBEADM = (
    KUBELET_HEADER
    + """\
authentication:
  anonymous:
    enabled: false
  webhook:
    cacheTTL: 0s
    enabled: true
  x509:
    clientCAFile: /etc/kubernetes/pki/ca.crt
authorization:
  mode: Webhook
  webhook:
    cacheAuthorizedTTL: 0s
    cacheUnauthorizedTTL: 0s
cgroupDriver: systemd
clusterDNS:
- 10.96.0.10
clusterDomain: cluster.local
containerRuntimeEndpoint: ""
cpuManagerReconcilePeriod: 0s
crashLoopBackOff: {}
evictionPressureTransitionPeriod: 0s
fileCheckFrequency: 0s
healthzBindAddress: 127.0.0.1
healthzPort: 10248
httpCheckFrequency: 0s
imageMaximumGCAge: 0s
imageMinimumGCAge: 0s
logging:
  flushFrequency: 0
  options:
    json:
      infoBufferSize: "0"
    text:
      infoBufferSize: "0"
  verbosity: 0
memorySwap: {}
nodeStatusReportFrequency: 0s
nodeStatusUpdateFrequency: 0s
rotateCertificates: true
runtimeRequestTimeout: 0s
serverTLSBootstrap: true
shutdownGracePeriod: 0s
shutdownGracePeriodCriticalPods: 0s
staticPodPath: /etc/kubernetes/manifests
streamingConnectionIdleTimeout: 0s
syncFrequency: 0s
volumeStatsAggPeriod: 0s
"""
)


def _files(tmp_path: Path, own: str, cluster: str) -> tuple[Path, Path]:
    own_path, cluster_path = tmp_path / "config.yaml", tmp_path / "kubelet-config.yaml"
    own_path.write_text(HEADER + own)
    cluster_path.write_text(cluster)
    return own_path, cluster_path


def _load(tmp_path: Path, own: str, cluster: str, *flags: str) -> config.Config:
    own_path, cluster_path = _files(tmp_path, own, cluster)
    return config.resolve(
        parse_flags(
            "--config", str(own_path), "--cluster-kubelet-config", str(cluster_path), *flags
        )
    )


def test_kubeadms_published_defaults_apply_with_go_unset_values_as_nodeagents_defaults(
    tmp_path: Path,
) -> None:
    cfg = _load(tmp_path, "", KUBEADM).kubelet
    assert cfg.cluster_dns == ("10.96.0.10",)
    assert (cfg.cluster_domain, cfg.cgroup_driver) == ("cluster.local", "systemd")
    assert cfg.server_tls_bootstrap and cfg.rotate_certificates
    assert cfg.static_pod_path == "/etc/kubernetes/manifests"
    # 0s is Go's unset: the defaults stand, as the kubelet's defaulting puts them.
    assert cfg.sync_frequency == Duration.parse("1m")
    assert cfg.runtime_request_timeout == Duration.parse("2m")
    assert cfg.authentication.webhook.cache_ttl == Duration.parse("2m")
    assert cfg.container_runtime_endpoint == "unix:///run/containerd/containerd.sock"


def test_the_operators_file_and_the_flags_win_field_by_field(tmp_path: Path) -> None:
    own = (
        "kubelet:\n  clusterDomain: own.local\n"
        "  authentication:\n    anonymous:\n      enabled: true\n"
    )
    cfg = _load(tmp_path, own, KUBEADM, "--client-ca-file", "/etc/nodeagent/ca.crt").kubelet
    assert cfg.cluster_domain == "own.local"  # the file over the cluster
    assert cfg.cluster_dns == ("10.96.0.10",)  # the cluster's, the file leaves it
    assert cfg.authentication.anonymous.enabled is True  # a mapping merges field by field
    assert cfg.authentication.webhook.enabled is True
    assert cfg.authentication.x509.client_ca_file == "/etc/nodeagent/ca.crt"  # the flag wins


def test_a_list_in_the_operators_file_replaces_the_clusters(tmp_path: Path) -> None:
    cfg = _load(tmp_path, "kubelet:\n  clusterDNS: [10.0.0.53]\n", KUBEADM).kubelet
    assert cfg.cluster_dns == ("10.0.0.53",)


def test_false_is_kept_not_taken_for_go_unset(tmp_path: Path) -> None:
    cfg = _load(tmp_path, "", KUBELET_HEADER + "failSwapOn: false\n").kubelet
    assert cfg.fail_swap_on is False


def test_a_bad_value_is_named_in_the_cluster_file_with_its_line(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as e:
        _load(tmp_path, "", KUBELET_HEADER + "clusterDNS:\n- 10.96.0.10\nmaxPods: lots\n")
    assert e.value.path == "maxPods"
    assert e.value.source == str(tmp_path / "kubelet-config.yaml")
    assert e.value.line == 5
    assert e.value.value == "lots"


def test_a_bad_value_the_operator_set_is_named_in_the_operators_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as e:
        _load(tmp_path, "kubelet:\n  maxPods: lots\n", KUBELET_HEADER + "maxPods: 20\n")
    assert (e.value.path, e.value.source) == ("kubelet.maxPods", str(tmp_path / "config.yaml"))


def test_an_unimplemented_field_with_a_value_is_refused_in_the_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as e:
        _load(tmp_path, "", KUBELET_HEADER + "cpuManagerPolicy: static\n")
    assert e.value.path == "cpuManagerPolicy"
    assert e.value.line == 3
    assert "does not implement" in e.value.message


@pytest.mark.parametrize(
    ("text", "path"),
    [
        ("kind: KubeletConfiguration\n", "apiVersion"),
        ("apiVersion: kubelet.config.k8s.io/v1beta1\nkind: NodeAgentConfiguration\n", "kind"),
    ],
)
def test_the_header_must_say_kubelet_configuration(tmp_path: Path, text: str, path: str) -> None:
    with pytest.raises(ConfigError) as e:
        _load(tmp_path, "", text)
    assert e.value.path == path
    assert "KubeletConfiguration" in str(e.value) or "kubelet.config.k8s.io" in str(e.value)


def test_a_missing_file_names_the_flag(tmp_path: Path) -> None:
    own = tmp_path / "config.yaml"
    own.write_text(HEADER)
    with pytest.raises(ConfigError) as e:
        config.resolve(
            parse_flags("--config", str(own), "--cluster-kubelet-config", str(tmp_path / "no"))
        )
    assert e.value.path == "--cluster-kubelet-config"
    assert "cannot read" in e.value.message


def test_the_field_in_the_file_names_the_cluster_file(tmp_path: Path) -> None:
    own, cluster = _files(tmp_path, "", KUBELET_HEADER + "clusterDomain: c.local\n")
    own.write_text(HEADER + f"node:\n  clusterKubeletConfig: {cluster}\n")
    assert config.resolve(parse_flags("--config", str(own))).kubelet.cluster_domain == "c.local"


def test_normalize_drops_go_unset_and_lists_unimplemented_fields() -> None:
    data, skipped = clusterkubelet.normalize(
        {
            "syncFrequency": "0s",
            "maxPods": 30,
            "containerRuntimeEndpoint": "",
            "resolvConf": "",
            "crashLoopBackOff": {},
            "logging": {"flushFrequency": 0, "options": {"json": {"infoBufferSize": "0"}}},
            "cpuManagerPolicy": "static",
            "enableServer": False,
            "authentication": {"webhook": {"cacheTTL": "0s", "bogus": "x"}},
        }
    )
    assert data == {"maxPods": 30, "resolvConf": ""}
    assert skipped == (
        ("cpuManagerPolicy", "static"),
        ("enableServer", False),
        ("authentication.webhook.bogus", "x"),
    )


def test_render_writes_a_kubelet_configuration_naming_what_was_left_out() -> None:
    cluster = clusterkubelet.parse(
        KUBELET_HEADER + "clusterDNS: [10.96.0.10]\ncpuManagerPolicy: static\n", source="x"
    )
    text = clusterkubelet.render(cluster, header="from the cluster")
    assert text.startswith("# from the cluster\n# Left out (nodeagent does not implement them):\n")
    assert '#   cpuManagerPolicy: "static"\n' in text
    again = clusterkubelet.parse(text, source="again")
    assert (again.data, again.skipped) == ({"clusterDNS": ["10.96.0.10"]}, ())
