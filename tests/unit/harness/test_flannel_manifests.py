"""flannel's objects as `make up NODES=N` applies them: upstream's shape, two documented values."""

from __future__ import annotations

import json
from typing import Any

from harness import flannel


def by_kind(items: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {item["kind"]: item for item in items}


def test_daemonset_has_the_upstream_shape() -> None:
    ds = by_kind(flannel.manifests("10.244.0.0/16"))["DaemonSet"]
    spec = ds["spec"]["template"]["spec"]
    assert (ds["metadata"]["namespace"], ds["metadata"]["name"]) == (
        "kube-flannel",
        "kube-flannel-ds",
    )
    assert spec["hostNetwork"] is True
    assert spec["priorityClassName"] == "system-node-critical"
    assert spec["tolerations"] == [{"operator": "Exists", "effect": "NoSchedule"}]
    assert [c["name"] for c in spec["initContainers"]] == ["install-cni-plugin", "install-cni"]
    assert spec["initContainers"][0]["args"] == ["-f", "/flannel", "/opt/cni/bin/flannel"]
    main = spec["containers"][0]
    assert main["args"] == ["--ip-masq", "--kube-subnet-mgr", "--healthz-port=8081"]
    assert main["securityContext"]["capabilities"]["add"] == ["NET_ADMIN", "NET_RAW"]
    paths = {v["name"]: v.get("hostPath", {}).get("path") for v in spec["volumes"]}
    assert paths == {
        "run": "/run/flannel",
        "cni-plugin": "/opt/cni/bin",
        "cni": "/etc/cni/net.d",
        "flannel-cfg": None,
        "xtables-lock": "/run/xtables.lock",
    }


def test_config_is_vxlan_on_the_cluster_range_and_the_plugins_cni_version() -> None:
    cm = by_kind(flannel.manifests("10.244.0.0/16"))["ConfigMap"]
    net = json.loads(cm["data"]["net-conf.json"])
    cni = json.loads(cm["data"]["cni-conf.json"])
    assert net == {
        "Network": "10.244.0.0/16",
        "EnableNFTables": False,
        "Backend": {"Type": "vxlan"},
    }
    assert cni["cniVersion"] == "0.4.0"
    assert [p["type"] for p in cni["plugins"]] == ["flannel", "portmap"]


def test_images_carry_upstream_names() -> None:
    assert flannel.flannel_image().startswith("ghcr.io/flannel-io/flannel:v")
    assert flannel.cni_plugin_image().startswith("ghcr.io/flannel-io/flannel-cni-plugin:v")
