"""A bad configuration file is refused with the field path, the bad value and what is allowed."""

from __future__ import annotations

import pytest
from config_loading import HEADER, Fail

# (id, YAML after the header, expected path, the value as written, text that says what's allowed)
BAD_FILES = [
    (
        "unknown kubelet field",
        "kubelet:\n  clusterDomian: x\n",
        "kubelet.clusterDomian",
        "clusterDomian",
        "unknown field (did you mean clusterDomain?)",
    ),
    (
        "unknown top-level field that belongs under kubelet",
        "maxPods: 5\n",
        "maxPods",
        "maxPods",
        "go under kubelet:",
    ),
    (
        "integer field given a word",
        "kubelet:\n  maxPods: many\n",
        "kubelet.maxPods",
        "many",
        "expected an integer",
    ),
    (
        "negative maxPods",
        "kubelet:\n  maxPods: -5\n",
        "kubelet.maxPods",
        -5,
        "must be between 1 and",
    ),
    (
        "port out of range",
        "kubelet:\n  port: 70000\n",
        "kubelet.port",
        70000,
        "between 1 and 65535",
    ),
    (
        "read-only port on",
        "kubelet:\n  readOnlyPort: 10255\n",
        "kubelet.readOnlyPort",
        10255,
        "nodeagent serves no unauthenticated port",
    ),
    (
        "healthz port out of range",
        "kubelet:\n  healthzPort: -1\n",
        "kubelet.healthzPort",
        -1,
        "or 0 to disable",
    ),
    (
        "duration with a space",
        "kubelet:\n  syncFrequency: 10 sec\n",
        "kubelet.syncFrequency",
        "10 sec",
        "a duration such as 300ms",
    ),
    (
        "duration without unit",
        "kubelet:\n  nodeStatusUpdateFrequency: 60\n",
        "kubelet.nodeStatusUpdateFrequency",
        "60",
        "write it as 60s",
    ),
    (
        "zero sync period",
        "proxy:\n  syncPeriod: 0s\n",
        "proxy.syncPeriod",
        "0s",
        "must be greater than 0",
    ),
    (
        "cgroup driver typo",
        "kubelet:\n  cgroupDriver: cgroupsfs\n",
        "kubelet.cgroupDriver",
        "cgroupsfs",
        'one of "cgroupfs", "systemd"',
    ),
    (
        "swap behavior removed in 1.30",
        "kubelet:\n  memorySwap:\n    swapBehavior: UnlimitedSwap\n",
        "kubelet.memorySwap.swapBehavior",
        "UnlimitedSwap",
        '"LimitedSwap", "NoSwap"',
    ),
    (
        "LimitedSwap while failSwapOn is true",
        "kubelet:\n  memorySwap:\n    swapBehavior: LimitedSwap\n",
        "kubelet.memorySwap.swapBehavior",
        "LimitedSwap",
        "requires kubelet.failSwapOn to be false",
    ),
    (
        "critical pods longer than the grace period",
        "kubelet:\n  shutdownGracePeriod: 10s\n  shutdownGracePeriodCriticalPods: 15s\n",
        "kubelet.shutdownGracePeriodCriticalPods",
        "15s",
        "must be <= kubelet.shutdownGracePeriod",
    ),
    (
        "grace period under a second",
        "kubelet:\n  shutdownGracePeriod: 500ms\n",
        "kubelet.shutdownGracePeriod",
        "500ms",
        "either 0 or at least 1s",
    ),
    (
        "priority groups together with shutdownGracePeriod",
        "kubelet:\n  shutdownGracePeriod: 30s\n  shutdownGracePeriodByPodPriority:\n"
        "  - {priority: 0, shutdownGracePeriodSeconds: 30}\n",
        "kubelet.shutdownGracePeriodByPodPriority",
        None,
        "cannot be set together with kubelet.shutdownGracePeriod (30s)",
    ),
    (
        "duplicate shutdown priority",
        "kubelet:\n  shutdownGracePeriodByPodPriority:\n"
        "  - {priority: 1000, shutdownGracePeriodSeconds: 10}\n"
        "  - {priority: 1000, shutdownGracePeriodSeconds: 20}\n",
        "kubelet.shutdownGracePeriodByPodPriority[1].priority",
        1000,
        "priorities must be unique",
    ),
    (
        "shutdown priority that is not a number",
        "kubelet:\n  shutdownGracePeriodByPodPriority:\n"
        "  - {priority: 0, shutdownGracePeriodSeconds: 10}\n"
        "  - {priority: high, shutdownGracePeriodSeconds: 20}\n",
        "kubelet.shutdownGracePeriodByPodPriority[1].priority",
        "high",
        "expected an integer",
    ),
    (
        "shutdown group without seconds",
        "kubelet:\n  shutdownGracePeriodByPodPriority:\n  - {priority: 0}\n",
        "kubelet.shutdownGracePeriodByPodPriority[0].shutdownGracePeriodSeconds",
        None,
        "required field is missing",
    ),
    (
        "negative shutdown seconds",
        "kubelet:\n  shutdownGracePeriodByPodPriority:\n"
        "  - {priority: 0, shutdownGracePeriodSeconds: -1}\n",
        "kubelet.shutdownGracePeriodByPodPriority[0].shutdownGracePeriodSeconds",
        -1,
        ">= 0",
    ),
    (
        "image GC low above high",
        "kubelet:\n  imageGCHighThresholdPercent: 70\n  imageGCLowThresholdPercent: 75\n",
        "kubelet.imageGCLowThresholdPercent",
        75,
        "must be less than",
    ),
    (
        "image GC percentage over 100",
        "kubelet:\n  imageGCHighThresholdPercent: 101\n",
        "kubelet.imageGCHighThresholdPercent",
        101,
        "between 0 and 100",
    ),
    (
        "image max age not above min age",
        "kubelet:\n  imageMaximumGCAge: 1m\n",
        "kubelet.imageMaximumGCAge",
        "1m0s",
        "must be greater than kubelet.imageMinimumGCAge",
    ),
    (
        "taint with unknown effect",
        "kubelet:\n  registerWithTaints:\n  - {key: dedicated, effect: NoScheduler}\n",
        "kubelet.registerWithTaints[0].effect",
        "NoScheduler",
        '"NoSchedule"',
    ),
    (
        "taint key with a space",
        "kubelet:\n  registerWithTaints:\n  - {key: bad key, effect: NoSchedule}\n",
        "kubelet.registerWithTaints[0].key",
        "bad key",
        "alphanumeric",
    ),
    (
        "node-role label the kubelet may not set",
        "node:\n  nodeLabels:\n    node-role.kubernetes.io/worker: ''\n",
        "node.nodeLabels",
        "node-role.kubernetes.io/worker",
        "must begin with an allowed prefix",
    ),
    (
        "label value too long",
        f"node:\n  nodeLabels:\n    team: {'x' * 64}\n",
        'node.nodeLabels["team"]',
        "x" * 64,
        "no more than 63 characters",
    ),
    (
        "node IP that is not an IP",
        "node:\n  nodeIP: 10.0.0\n",
        "node.nodeIP",
        "10.0.0",
        "is not an IP address",
    ),
    (
        "two IPv4 node IPs",
        "node:\n  nodeIP: 10.0.0.1,10.0.0.2\n",
        "node.nodeIP",
        "10.0.0.1,10.0.0.2",
        "one IPv4 and one IPv6",
    ),
    ("loopback node IP", "node:\n  nodeIP: 127.0.0.1\n", "node.nodeIP", "127.0.0.1", "loopback"),
    (
        "second cluster DNS address invalid",
        "kubelet:\n  clusterDNS: [10.96.0.10, dns]\n",
        "kubelet.clusterDNS[1]",
        "dns",
        "is not an IP address",
    ),
    (
        "unsafe sysctl that is not namespaced",
        "kubelet:\n  allowedUnsafeSysctls: ['kernel.msg*', kernel.panic]\n",
        "kubelet.allowedUnsafeSysctls[1]",
        "kernel.panic",
        "is not known to be namespaced: only kernel.sem, kernel.shm*, kernel.msg*, "
        "fs.mqueue.* and net.* sysctls can be allowed",
    ),
    (
        "unsafe sysctl pattern with a star inside",
        "kubelet:\n  allowedUnsafeSysctls: ['net.*.ip_forward']\n",
        "kubelet.allowedUnsafeSysctls[0]",
        "net.*.ip_forward",
        "must have at most 253 characters and match regex",
    ),
    (
        "relative root dir",
        "node:\n  rootDir: var/lib/nodeagent\n",
        "node.rootDir",
        "var/lib/nodeagent",
        "absolute path",
    ),
    (
        "runtime endpoint without scheme",
        "kubelet:\n  containerRuntimeEndpoint: /run/containerd/containerd.sock\n",
        "kubelet.containerRuntimeEndpoint",
        "/run/containerd/containerd.sock",
        "unix:///",
    ),
    (
        "eviction threshold given a number",
        "kubelet:\n  evictionHard:\n    memory.available: 100\n",
        'kubelet.evictionHard["memory.available"]',
        "100",
        "expected a string",
    ),
    (
        "eviction percentage over 100",
        "kubelet:\n  evictionHard:\n    nodefs.available: 150%\n",
        'kubelet.evictionHard["nodefs.available"]',
        "150%",
        "between 0% and 100%",
    ),
    (
        "unknown eviction signal",
        "kubelet:\n  evictionHard:\n    disk.available: 10%\n",
        'kubelet.evictionHard["disk.available"]',
        "disk.available",
        '"nodefs.available"',
    ),
    (
        "soft eviction threshold without its grace period",
        "kubelet:\n  evictionSoft:\n    memory.available: 1Gi\n",
        'kubelet.evictionSoftGracePeriod["memory.available"]',
        None,
        "must be set: evictionSoft has a threshold",
    ),
    (
        "minimum reclaim that is not a quantity",
        "kubelet:\n  evictionMinimumReclaim:\n    memory.available: lots\n",
        'kubelet.evictionMinimumReclaim["memory.available"]',
        "lots",
        "a quantity such as 100Mi",
    ),
    (
        "negative max pod grace period",
        "kubelet:\n  evictionMaxPodGracePeriod: -5\n",
        "kubelet.evictionMaxPodGracePeriod",
        -5,
        "must not be negative",
    ),
    (
        "system-reserved enforced without its cgroup",
        "kubelet:\n  enforceNodeAllocatable: [pods, system-reserved]\n",
        "kubelet.systemReservedCgroup",
        None,
        "invalid configuration: systemReservedCgroup (--system-reserved-cgroup) must be "
        'specified when "system-reserved" contained in enforceNodeAllocatable',
    ),
    (
        "qosReserved without its gate",
        "kubelet:\n  qosReserved:\n    memory: 50%\n",
        "kubelet.qosReserved",
        None,
        "requires feature gate QOSReserved",
    ),
    (
        "qosReserved for cpu",
        "kubelet:\n  featureGates: {QOSReserved: true}\n  qosReserved:\n    cpu: 50%\n",
        'kubelet.qosReserved["cpu"]',
        "cpu",
        'cannot reserve "cpu" resource',
    ),
    (
        "qosReserved not a percentage",
        "kubelet:\n  featureGates: {QOSReserved: true}\n  qosReserved:\n    memory: 512Mi\n",
        'kubelet.qosReserved["memory"]',
        "512Mi",
        "percentage expected, got '512Mi'",
    ),
    (
        "PSI contention threshold above 100 percent",
        "kubelet:\n  kubepodsMemoryContentionThreshold: 150\n",
        "kubelet.kubepodsMemoryContentionThreshold",
        150,
        "must be between 0 and 100 (PSI percent)",
    ),
    (
        "PSI contention threshold negative",
        "kubelet:\n  systemDiskContentionThreshold: -0.5\n",
        "kubelet.systemDiskContentionThreshold",
        -0.5,
        "must be between 0 and 100",
    ),
    (
        "reserved memory that is not a quantity",
        "kubelet:\n  kubeReserved:\n    memory: lots\n",
        'kubelet.kubeReserved["memory"]',
        "lots",
        "a quantity such as 100Mi",
    ),
    (
        "unknown feature gate",
        "kubelet:\n  featureGates:\n    NodeSwapp: true\n",
        'kubelet.featureGates["NodeSwapp"]',
        "NodeSwapp",
        "known gates: ExtendWebSocketsToKubelet, GracefulNodeShutdown",
    ),
    (
        "negative registry pull rate",
        "kubelet:\n  registryPullQPS: -1\n",
        "kubelet.registryPullQPS",
        -1,
        "must be >= 0",
    ),
    (
        "negative registry burst",
        "kubelet:\n  registryBurst: -3\n",
        "kubelet.registryBurst",
        -3,
        "must be >= 0",
    ),
    (
        "parallel pulls while serialized",
        "kubelet:\n  serializeImagePulls: true\n  maxParallelImagePulls: 5\n",
        "kubelet.maxParallelImagePulls",
        5,
        "unless kubelet.serializeImagePulls is false",
    ),
    (
        "allocatable enforcement without QoS cgroups",
        "kubelet:\n  cgroupsPerQOS: false\n",
        "kubelet.enforceNodeAllocatable",
        "pods",
        "unless kubelet.cgroupsPerQOS is true",
    ),
    (
        "serving certificate without key",
        "kubelet:\n  tlsCertFile: /etc/nodeagent/tls.crt\n",
        "kubelet.tlsPrivateKeyFile",
        None,
        "must be set together with kubelet.tlsCertFile",
    ),
    (
        "masquerade bit out of range",
        "proxy:\n  masqueradeBit: 32\n",
        "proxy.masqueradeBit",
        32,
        "between 0 and 31",
    ),
    (
        "min sync period above sync period",
        "proxy:\n  minSyncPeriod: 1m\n",
        "proxy.minSyncPeriod",
        "1m0s",
        "must be <= proxy.syncPeriod (30s)",
    ),
    (
        "an unsupported local traffic detector",
        "proxy:\n  detectLocalMode: BridgeInterface\n",
        "proxy.detectLocalMode",
        "BridgeInterface",
        "is not one of ClusterCIDR, NodeCIDR",
    ),
    (
        "a health server address without a port",
        "proxy:\n  healthzBindAddress: 0.0.0.0\n",
        "proxy.healthzBindAddress",
        "0.0.0.0",
        "is not an ip:port",
    ),
    (
        "cluster CIDR typo",
        "proxy:\n  clusterCIDR: 10.244.0.0/33\n",
        "proxy.clusterCIDR",
        "10.244.0.0/33",
        "is not a CIDR",
    ),
    (
        "service CIDR with a prefix too long",
        "proxy:\n  serviceCIDR: 10.96.0.0/40\n",
        "proxy.serviceCIDR",
        "10.96.0.0/40",
        "is not a CIDR",
    ),
    (
        "NodePort address that is not a CIDR",
        "proxy:\n  nodePortAddresses: [eth0]\n",
        "proxy.nodePortAddresses[0]",
        "eth0",
        '"primary"',
    ),
    ("section that is not a mapping", "kubelet: 5\n", "kubelet", 5, "expected a mapping"),
    (
        "label key that is not a string",
        "node:\n  nodeLabels:\n    1: x\n",
        "node.nodeLabels",
        1,
        "keys must be strings",
    ),
]


@pytest.mark.parametrize(
    ("text", "path", "value", "allowed"),
    [pytest.param(*case[1:], id=case[0]) for case in BAD_FILES],
)
def test_bad_file_is_refused_naming_the_field_and_value(
    fail: Fail, text: str, path: str, value: object, allowed: str
) -> None:
    err = fail(text)
    assert err.path == path
    assert allowed in str(err)
    assert err.source.endswith("config.yaml")
    if value is not None:
        shown = str(value)
        assert shown in str(err)
        assert err.value == value or str(err.value) == shown or shown in str(err.value)


def test_there_are_at_least_fifteen_distinct_bad_inputs() -> None:
    assert len({case[2] for case in BAD_FILES}) >= 15


def test_grace_period_error_reads_like_the_kubelet(fail: Fail) -> None:
    err = fail("kubelet:\n  shutdownGracePeriod: 10s\n  shutdownGracePeriodCriticalPods: 15s\n")
    assert str(err).endswith(
        "kubelet.shutdownGracePeriodCriticalPods (15s) must be <= kubelet.shutdownGracePeriod (10s)"
    )


def test_disallowed_node_label_uses_the_kubelet_error_text(fail: Fail) -> None:
    err = fail("node:\n  nodeLabels:\n    node-role.kubernetes.io/master: ''\n    a.k8s.io/b: c\n")
    assert err.message == (
        "unknown 'kubernetes.io' or 'k8s.io' labels specified with --node-labels: "
        "[a.k8s.io/b node-role.kubernetes.io/master]\n"
        "--node-labels in the 'kubernetes.io' namespace must begin with an allowed prefix "
        "(kubelet.kubernetes.io, node.kubernetes.io) or be in the specifically allowed set "
        "(beta.kubernetes.io/arch, beta.kubernetes.io/instance-type, beta.kubernetes.io/os, "
        "failure-domain.beta.kubernetes.io/region, failure-domain.beta.kubernetes.io/zone, "
        "kubernetes.io/arch, kubernetes.io/hostname, kubernetes.io/os, "
        "node.kubernetes.io/instance-type, topology.kubernetes.io/region, "
        "topology.kubernetes.io/zone)"
    )


def test_error_names_the_file_and_line_of_the_field(fail: Fail) -> None:
    err = fail("node:\n  rootDir: /var/lib/nodeagent\nkubelet:\n  port: 0\n")
    assert err.line == 6  # two header lines, then node, rootDir, kubelet, port
    assert str(err) == f"{err.source}:6: kubelet.port: 0 must be between 1 and 65535"


def test_every_problem_is_reported_in_one_run_in_file_order(fail: Fail) -> None:
    err = fail("proxy:\n  masqueradeBit: 40\nkubelet:\n  maxPods: 0\n  port: 0\n")
    assert [e.path for e in err.all] == ["proxy.masqueradeBit", "kubelet.maxPods", "kubelet.port"]
    assert len(str(err).splitlines()) == 3


def test_yaml_syntax_error_reports_line_and_column(fail: Fail) -> None:
    err = fail("kubelet:\n  maxPods: [1, 2\n")
    assert err.path == ""
    assert err.line == 5
    assert "invalid YAML at line 5, column 1" in err.message


def test_a_field_written_twice_is_an_error(fail: Fail) -> None:
    err = fail("kubelet:\n  maxPods: 10\n  maxPods: 20\n")
    assert (err.path, err.line) == ("kubelet.maxPods", 5)
    assert "written twice (first at line 4)" in err.message


@pytest.mark.parametrize(
    ("text", "path", "value"),
    [
        pytest.param(
            "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: NodeAgentConfiguration\n",
            "apiVersion",
            "kubelet.config.k8s.io/v1beta1",
            id="wrong apiVersion",
        ),
        pytest.param(
            "apiVersion: nodeagent.io/v1alpha1\nkind: KubeletConfiguration\n",
            "kind",
            "KubeletConfiguration",
            id="a KubeletConfiguration file",
        ),
        pytest.param(
            "kind: NodeAgentConfiguration\nkubelet: {}\n",
            "apiVersion",
            None,
            id="missing apiVersion",
        ),
        pytest.param("- kubelet\n", "", None, id="a list instead of a mapping"),
    ],
)
def test_header_must_match_exactly(fail: Fail, text: str, path: str, value: object) -> None:
    err = fail(text, header=False)
    assert err.path == path
    if value is not None:
        assert err.value == value
        assert str(value) in str(err)
    assert (
        "nodeagent.io/v1alpha1" in str(err)
        or "NodeAgentConfiguration" in str(err)
        or ("mapping" in str(err))
    )


def test_header_constant_matches_what_the_fixture_writes() -> None:
    assert HEADER.startswith("apiVersion: nodeagent.io/v1alpha1\n")


def test_recursive_yaml_alias_is_refused(fail: Fail) -> None:
    err = fail("kubelet:\n  clusterDNS: &x [*x]\n")
    assert err.path == "kubelet.clusterDNS[0]"
    assert "recursive data is not allowed" in err.message


def test_two_yaml_documents_are_refused(fail: Fail) -> None:
    err = fail("kubelet: {}\n---\nproxy: {}\n")
    assert err.line == 4
    assert "expected a single document in the stream, but found another document" in str(err)
