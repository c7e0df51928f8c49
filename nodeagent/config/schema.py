"""The NodeAgentConfiguration file: ``apiVersion``, ``kind``, ``node:``, ``kubelet:``, ``proxy:``.

Every section is a frozen ``msgspec.Struct`` that rejects unknown fields. Lists are tuples so a
``Config`` can be shared between managers without copies.
"""

from __future__ import annotations

from typing import Annotated, Final, Literal

from msgspec import field

from nodeagent.config.schema_kubelet import KubeletConfiguration, Section, doc, dur
from nodeagent.config.units import Duration

API_VERSION: Final = "nodeagent.io/v1alpha1"
KIND: Final = "NodeAgentConfiguration"


class NodeConfiguration(Section, frozen=True):
    """The kubelet's flag-only settings, which have no KubeletConfiguration field, and
    nodeagent's own settings of the node (`streamingAuthorization`)."""

    kubeconfig: Annotated[
        str, doc("Kubeconfig with the node's API server credentials (`--kubeconfig`).")
    ] = "/etc/nodeagent/kubeconfig"
    bootstrap_kubeconfig: Annotated[
        str,
        doc(
            "Kubeconfig with a bootstrap token, used to obtain a client certificate when "
            "`kubeconfig` does not exist yet; empty disables TLS bootstrap. `nodeagent join` "
            "writes it here (or as `bootstrap-kubeconfig` beside `kubeconfig` when empty) and "
            "passes it as `--bootstrap-kubeconfig` in `<rootDir>/join-flags.env`."
        ),
    ] = ""
    cluster_kubelet_config: Annotated[
        str,
        doc(
            "A KubeletConfiguration file (`kubelet.config.k8s.io/v1beta1`) with the cluster's "
            "kubelet settings, applied beneath the `kubelet:` section: a field set there or by "
            "a flag wins, mappings merge field by field. `nodeagent join` writes the cluster's "
            "`kube-system/kubelet-config` to `<rootDir>/kubelet-config.yaml` and passes it as "
            "`--cluster-kubelet-config` in `<rootDir>/join-flags.env`. Go's unset values "
            '(`0s`, `""`) mean the default; a field nodeagent does not implement is refused. '
            "Empty: none."
        ),
    ] = ""
    hostname_override: Annotated[
        str, doc("Node name to use instead of the host name (lowercase DNS subdomain).")
    ] = ""
    node_ip: Annotated[
        str,
        doc(
            "IP to report as InternalIP: one address or an IPv4,IPv6 pair; `0.0.0.0` or `::` "
            "auto-detect preferring that family; empty auto-detects."
        ),
    ] = field(name="nodeIP", default="")
    node_labels: Annotated[
        dict[str, str],
        doc(
            "Labels put on the Node when it is registered. Keys in the kubernetes.io and "
            "k8s.io namespaces are limited to the kubelet's allowed set."
        ),
    ] = field(default_factory=dict)
    root_dir: Annotated[
        str, doc("State directory (pods, volumes, plugins, certificates, checkpoints).")
    ] = "/var/lib/nodeagent"
    image_credential_provider_config_path: Annotated[
        str,
        doc(
            "Credential provider plugin config (`--image-credential-provider-config`): a "
            "`CredentialProviderConfig` file (YAML or JSON, `kubelet.config.k8s.io/v1`), or a "
            "directory whose `*.json`/`*.yaml`/`*.yml` files are merged in lexical order; "
            "empty: no plugins. Needs `imageCredentialProviderBinDir`."
        ),
    ] = ""
    image_credential_provider_bin_dir: Annotated[
        str,
        doc(
            "Directory of the credential provider plugin executables "
            "(`--image-credential-provider-bin-dir`); each provider's `name` is its file here."
        ),
    ] = ""
    streaming_authorization: Annotated[
        Literal["Create", "HTTPMethod"],
        doc(
            "Verb the kubelet API authorizes `/exec`, `/attach`, `/run` and `/portForward` "
            "with (on `nodes/proxy`). `Create`: always `create`, whatever the transport, so a "
            "token with only `get nodes/proxy` (common in monitoring charts) cannot run "
            "commands in containers. `HTTPMethod`: the verb follows the HTTP method, as on the "
            "kubelet, where a WebSocket upgrade (a GET) needs only `get`. nodeagent's own; "
            "not a kubelet setting."
        ),
    ] = "Create"


class ConntrackConfiguration(Section, frozen=True):
    max_per_core: Annotated[
        int, doc("conntrack entries per CPU (0 = leave the kernel limit alone).")
    ] = 32768
    min: Annotated[int, doc("Lower bound of the conntrack table size.")] = 131072
    tcp_established_timeout: Annotated[
        Duration, doc("Idle timeout of established TCP flows (0 = leave as is).")
    ] = dur("24h")
    tcp_close_wait_timeout: Annotated[
        Duration, doc("Timeout of TCP flows in CLOSE_WAIT (0 = leave as is).")
    ] = dur("1h")
    tcp_be_liberal: Annotated[bool, doc("Do not mark out-of-window TCP packets INVALID.")] = False
    udp_timeout: Annotated[Duration, doc("UDP flow timeout (0 = leave as is).")] = dur("0s")
    udp_stream_timeout: Annotated[
        Duration, doc("UDP stream (assured) timeout (0 = leave as is).")
    ] = dur("0s")


class ProxyConfiguration(Section, frozen=True):
    """Service proxying in the style of kube-proxy's nftables mode."""

    enabled: Annotated[bool, doc("Program Services into nftables on this node.")] = True
    cluster_cidr: Annotated[
        str,
        doc(
            "Pod CIDR(s) of the cluster (IPv4, IPv6 or `v4,v6`); traffic from outside them to "
            "a ClusterIP is masqueraded. Empty: only `masqueradeAll` masquerades."
        ),
    ] = field(name="clusterCIDR", default="")
    detect_local_mode: Annotated[
        str,
        doc(
            "How traffic from this cluster's pods is told apart (kube-proxy's "
            "`detectLocalMode`): `ClusterCIDR` (from `clusterCIDR`) or `NodeCIDR` (from the "
            "Node's `spec.podCIDRs`, waited for at start). Traffic from elsewhere to a "
            "ClusterIP is masqueraded."
        ),
    ] = "ClusterCIDR"
    service_cidr: Annotated[
        str,
        doc(
            "Service CIDR(s) of the cluster (the apiserver's `--service-cluster-ip-range`); "
            "traffic to an address in them that no Service has is dropped. Empty: not dropped."
        ),
    ] = field(name="serviceCIDR", default="")
    node_port_addresses: Annotated[
        tuple[str, ...],
        doc(
            "CIDRs whose local addresses accept NodePorts, or `primary`; empty = `primary` "
            "(the node's IPs). Never 127.0.0.1."
        ),
    ] = ()
    sync_period: Annotated[
        Duration,
        doc(
            "Retry delay after a failed sync (then a full one). Full resyncs run hourly, as "
            "kube-proxy's; changes are applied as they come."
        ),
    ] = dur("30s")
    min_sync_period: Annotated[
        Duration, doc("Min period between syncs; changes inside it are coalesced.")
    ] = dur("1s")
    masquerade_all: Annotated[bool, doc("Masquerade all traffic to Service IPs.")] = False
    masquerade_bit: Annotated[
        int, doc("Packet mark bit (0-31) that flags a connection for masquerade.")
    ] = 14
    healthz_bind_address: Annotated[
        str,
        doc(
            "`ip:port` of kube-proxy's health server (`/healthz`, `/livez`; what load "
            "balancers and liveness probes poll). Empty: not served."
        ),
    ] = "0.0.0.0:10256"
    metrics_bind_address: Annotated[
        str,
        doc(
            "`ip:port` of kube-proxy's metrics server (`/metrics` with the `kubeproxy_*` "
            "metrics, `/healthz`, `/proxyMode`). Empty: not served."
        ),
    ] = "127.0.0.1:10249"
    conntrack: ConntrackConfiguration = ConntrackConfiguration()


class Config(Section, frozen=True):
    """A whole NodeAgentConfiguration, with every default filled in."""

    api_version: Annotated[str, doc(f"Must be `{API_VERSION}`.")] = API_VERSION
    kind: Annotated[str, doc(f"Must be `{KIND}`.")] = KIND
    node: NodeConfiguration = NodeConfiguration()
    kubelet: KubeletConfiguration = KubeletConfiguration()
    proxy: ProxyConfiguration = ProxyConfiguration()
