"""The CSI hostpath driver's objects (``make up`` and the ``csi_hostpath`` fixture) and the
wrapper modules its sidecars are built through."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from harness import csi_build, csi_hostpath


def objects(**kwargs: Any) -> dict[tuple[str, str], dict[str, Any]]:
    items = csi_hostpath.manifests(
        root_dir=kwargs.pop("root_dir", Path("/var/lib/agent/root")),
        data_dir=kwargs.pop("data_dir", Path("/srv/csi-data")),
        **kwargs,
    )
    return {(item["kind"], item["metadata"]["name"]): item for item in items}


def test_default_storage_class_binds_on_first_consumer_and_expands() -> None:
    sc = objects()[("StorageClass", "csi-hostpath-sc")]
    assert sc["metadata"]["annotations"] == {"storageclass.kubernetes.io/is-default-class": "true"}
    assert sc["provisioner"] == "hostpath.csi.k8s.io"
    assert sc["volumeBindingMode"] == "WaitForFirstConsumer"
    assert sc["allowVolumeExpansion"] is True
    assert sc["reclaimPolicy"] == "Delete"
    plain = objects(default_class=False)[("StorageClass", "csi-hostpath-sc")]
    assert plain["metadata"]["annotations"] == {}


def test_csidriver_as_upstreams() -> None:
    spec = objects()[("CSIDriver", "hostpath.csi.k8s.io")]["spec"]
    assert spec == {
        "attachRequired": True,
        "podInfoOnMount": True,
        "volumeLifecycleModes": ["Persistent", "Ephemeral"],
        "fsGroupPolicy": "File",
    }


def test_plugin_paths_follow_the_node_root_dir() -> None:
    sts = objects(root_dir=Path("/r/"))[("StatefulSet", "csi-hostpathplugin")]
    pod = sts["spec"]["template"]["spec"]
    paths = {v["name"]: (v["hostPath"]["path"], v["hostPath"]["type"]) for v in pod["volumes"]}
    assert paths == {
        "socket-dir": ("/r/plugins/csi-hostpath", "DirectoryOrCreate"),
        "mountpoint-dir": ("/r/pods", "DirectoryOrCreate"),
        "registration-dir": ("/r/plugins_registry", "Directory"),
        "plugins-dir": ("/r/plugins", "DirectoryOrCreate"),
        "csi-data-dir": ("/srv/csi-data", "DirectoryOrCreate"),
        "dev-dir": ("/dev", "Directory"),
    }
    containers = {c["name"]: c for c in pod["containers"]}
    plugin_mounts = {m["name"]: m for m in containers["hostpath"]["volumeMounts"]}
    # the plugin sees the node's paths at the same place: the kubelet passes node paths
    assert plugin_mounts["mountpoint-dir"]["mountPath"] == "/r/pods"
    assert plugin_mounts["plugins-dir"]["mountPath"] == "/r/plugins"
    for name in ("mountpoint-dir", "plugins-dir"):
        assert plugin_mounts[name]["mountPropagation"] == "Bidirectional"
    assert containers["hostpath"]["securityContext"] == {"privileged": True}
    registrar = containers["node-driver-registrar"]
    assert "--kubelet-registration-path=/r/plugins/csi-hostpath/csi.sock" in registrar["args"]
    assert sorted(containers) == [
        "csi-attacher",
        "csi-provisioner",
        "csi-resizer",
        "hostpath",
        "liveness-probe",
        "node-driver-registrar",
    ]


def test_images_under_their_upstream_names() -> None:
    names = csi_hostpath.image_names()
    for image in names.values():
        assert image.startswith("registry.k8s.io/sig-storage/")
    pins = {s.name: s.version for s in csi_build.sidecars()}
    assert (
        names["csi-provisioner"]
        == f"registry.k8s.io/sig-storage/csi-provisioner:{pins['csi-provisioner']}"
    )
    assert names["hostpathplugin"].endswith(":" + csi_hostpath.STANDIN_TAGS["hostpathplugin"])


def test_pin_and_namespace_for_a_tests_node() -> None:
    got = objects(namespace="na-proc-1", node_name="na-proc-1")
    sts = got[("StatefulSet", "csi-hostpathplugin")]
    assert sts["metadata"]["namespace"] == "na-proc-1"
    assert sts["spec"]["template"]["spec"]["nodeName"] == "na-proc-1"
    binding = got[("ClusterRoleBinding", "csi-hostpath-provisioner")]
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "csi-hostpathplugin-sa", "namespace": "na-proc-1"}
    ]
    assert ("Role", "csi-hostpath-attacher") in got


def test_wrapper_module_repeats_the_upstreams_version_replaces() -> None:
    upstream = """module github.com/kubernetes-csi/external-snapshotter/v8

go 1.25.5

replace github.com/kubernetes-csi/external-snapshotter/client/v8 => ./client

replace k8s.io/kubelet => k8s.io/kubelet v0.35.0 // pinned

replace (
\tk8s.io/api => k8s.io/api v0.35.0
\texample.com/a v1.0.0 => example.com/b v1.1.0
)
"""
    assert csi_build.version_replaces(upstream) == [
        "k8s.io/kubelet => k8s.io/kubelet v0.35.0",
        "k8s.io/api => k8s.io/api v0.35.0",
        "example.com/a v1.0.0 => example.com/b v1.1.0",
    ]
    [snapshotter] = [s for s in csi_build.sidecars() if s.name == "csi-snapshotter"]
    text = csi_build.wrapper_go_mod(snapshotter, upstream)
    assert f"require {snapshotter.module} {snapshotter.version}" in text
    assert "replace k8s.io/api => k8s.io/api v0.35.0" in text
    assert "./client" not in text
    assert (
        snapshotter.package
        == "github.com/kubernetes-csi/external-snapshotter/v8/cmd/csi-snapshotter"
    )


def test_a_tests_driver_reaches_the_api_through_a_kubeconfig_on_the_host_network() -> None:
    sts = objects(kubeconfig_secret="kc", health_port=40123)[("StatefulSet", "csi-hostpathplugin")]
    pod = sts["spec"]["template"]["spec"]
    assert pod["hostNetwork"] is True
    assert {"name": "api-kubeconfig", "secret": {"secretName": "kc"}} in pod["volumes"]
    containers = {c["name"]: c for c in pod["containers"]}
    for name in ("csi-provisioner", "csi-attacher", "csi-resizer"):
        assert "--kubeconfig=/etc/csi-hostpath/kubeconfig" in containers[name]["args"]
    assert "--health-port=40123" in containers["liveness-probe"]["args"]
    assert containers["hostpath"]["ports"][0]["containerPort"] == 40123
    # make up's: in-cluster config on the pod network
    plain = objects()[("StatefulSet", "csi-hostpathplugin")]["spec"]["template"]["spec"]
    assert "hostNetwork" not in plain
    assert not any(a.startswith("--kubeconfig") for c in plain["containers"] for a in c["args"])
