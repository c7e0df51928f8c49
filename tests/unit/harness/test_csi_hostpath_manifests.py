"""The CSI hostpath driver's objects (``make up`` and the ``csi_hostpath`` fixture) and the
wrapper modules its sidecars are built through."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Any

import pytest
from harness import csi_build, csi_hostpath
from harness.versions import load_versions


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
    assert (
        snapshotter.package
        == "github.com/kubernetes-csi/external-snapshotter/v8/cmd/csi-snapshotter"
    )


SNAPSHOTTER_MOD = """module github.com/kubernetes-csi/external-snapshotter/v8

require (
\tgoogle.golang.org/grpc v1.78.0
\tk8s.io/api v0.35.0
)

replace github.com/kubernetes-csi/external-snapshotter/client/v8 => ./client

replace (
\tk8s.io/api => k8s.io/api v0.35.0
\tk8s.io/kubelet => k8s.io/kubelet v0.35.0
\texample.com/a v1.0.0 => example.com/b v1.1.0
)
"""

ATTACHER_MOD = """module github.com/kubernetes-csi/external-attacher/v4

require k8s.io/api v0.37.0

replace k8s.io/api => k8s.io/api v0.37.0
replace k8s.io/client-go => k8s.io/client-go v0.37.0
"""


def _pair() -> list[csi_build.Sidecar]:
    by_name = {s.name: s for s in csi_build.sidecars()}
    return [by_name["csi-snapshotter"], by_name["csi-attacher"]]


def test_one_wrapper_module_pins_every_sidecars_staging_modules_to_one_version() -> None:
    text = csi_build.wrapper_go_mod(_pair(), [SNAPSHOTTER_MOD, ATTACHER_MOD], "v0.37.0")
    for sidecar in _pair():
        assert f"\t{sidecar.module} {sidecar.version}\n" in text
    replaces = sorted(line for line in text.splitlines() if line.startswith("replace "))
    assert replaces == [
        "replace example.com/a v1.0.0 => example.com/b v1.1.0",
        "replace k8s.io/api => k8s.io/api v0.37.0",
        "replace k8s.io/client-go => k8s.io/client-go v0.37.0",
        "replace k8s.io/kubelet => k8s.io/kubelet v0.37.0",
    ]
    assert "./client" not in text


def test_a_sidecar_asking_for_newer_staging_modules_stops_the_build_naming_it() -> None:
    with pytest.raises(
        SystemExit,
        match=r"csi-attacher .* asks for k8s.io/api v0.37.0, newer"
        r" than CSI_STAGING_VERSION=v0.36.3",
    ):
        csi_build.wrapper_go_mod(_pair(), [SNAPSHOTTER_MOD, ATTACHER_MOD], "v0.36.3")


def test_two_sidecars_replacing_one_module_differently_stop_the_build() -> None:
    other = ATTACHER_MOD + "replace example.com/a v1.0.0 => example.com/c v1.2.0\n"
    said = (
        "csi-snapshotter replaces example.com/a v1.0.0 with example.com/b v1.1.0"
        " but csi-attacher with example.com/c v1.2.0"
    )
    with pytest.raises(SystemExit, match=re.escape(said)):
        csi_build.wrapper_go_mod(_pair(), [SNAPSHOTTER_MOD, other], "v0.37.0")


def test_a_sidecars_recipe_changes_with_another_sidecar_or_the_staging_version() -> None:
    versions = load_versions()
    [snapshotter, _] = _pair()
    base = csi_build.sidecar_recipe(snapshotter, "go1.26.0", versions)
    bumped = dataclasses.replace(versions, csi_attacher="v4.99.0")
    staged = dataclasses.replace(versions, csi_staging="v0.38.0")
    assert csi_build.sidecar_recipe(snapshotter, "go1.26.0", bumped) != base
    assert csi_build.sidecar_recipe(snapshotter, "go1.26.0", staged) != base


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
