"""``nodeagent join`` downloads ``kube-system/kubelet-config`` as kubeadm does, over the fake
apiserver: what it writes, what the agent then runs with, and what it refuses."""

from __future__ import annotations

import argparse
import stat
from pathlib import Path

import pytest
import yaml
from unit.join.join_vectors import TOKEN
from unit.join.test_join_command import PINNED, FakeSteps, join, node, written

from nodeagent import config
from nodeagent.apiserver import CONFIGMAPS, Forbidden, ServerError
from nodeagent.join.files import read_flags_env
from nodeagent.testing.fake_apiserver import FakeApiServer

pytestmark = pytest.mark.looptime
__all__ = ["node"]  # the fixture, shared with the join command's tests

KUBELET = """\
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
clusterDNS:
- 10.96.0.10
clusterDomain: cluster.local
serverTLSBootstrap: true
rotateCertificates: true
syncFrequency: 0s
crashLoopBackOff: {}
"""


def published(text: str | None = KUBELET, **data: str) -> FakeApiServer:
    api = FakeApiServer()
    body = {"kubelet": text, **data} if text is not None else data
    api.seed(
        CONFIGMAPS,
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "kubelet-config", "namespace": "kube-system"},
            "data": body,
        },
    )
    return api


def effective(node: Path) -> config.Config:
    """What `nodeagent run --config <config> <the flags join wrote>` runs with."""
    parser = argparse.ArgumentParser()
    config.add_flags(parser)
    flags = read_flags_env(node / "var" / "join-flags.env")
    return config.resolve(parser.parse_args(["--config", str(node / "config.yaml"), *flags]))


def test_the_clusters_kubelet_configuration_is_written_and_named_in_the_flags(node: Path) -> None:
    steps = FakeSteps(api=published())
    code, out, err = join(node, *PINNED, steps=steps)
    assert (code, err) == (0, "")
    path = node / "var" / "kubelet-config.yaml"
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
    doc = yaml.safe_load(path.read_text())
    assert doc == {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "clusterDNS": ["10.96.0.10"],
        "clusterDomain": "cluster.local",
        "serverTLSBootstrap": True,
        "rotateCertificates": True,
    }
    assert f"--cluster-kubelet-config={path}" in read_flags_env(node / "var" / "join-flags.env")
    wrote = "Wrote the cluster's kubelet configuration (ConfigMap kube-system/kubelet-config)"
    assert f"{wrote} to {path}" in out
    kubelet = effective(node).kubelet
    assert kubelet.cluster_dns == ("10.96.0.10",)
    assert kubelet.server_tls_bootstrap is True
    calls = steps.api.calls_to("get", "configmaps")
    assert [(c.namespace, c.name) for c in calls] == [("kube-system", "kubelet-config")]


def test_the_operators_config_is_not_written_and_wins(node: Path) -> None:
    own = node / "config.yaml"
    doc = yaml.safe_load(own.read_text())
    doc["kubelet"] = {"clusterDomain": "own.local"}
    own.write_text(yaml.safe_dump(doc))
    before = own.read_text()
    assert join(node, *PINNED, steps=FakeSteps(api=published()))[0] == 0
    assert own.read_text() == before
    kubelet = effective(node).kubelet
    assert (kubelet.cluster_domain, kubelet.cluster_dns) == ("own.local", ("10.96.0.10",))


def test_the_file_goes_where_the_configuration_says(node: Path) -> None:
    own = node / "config.yaml"
    doc = yaml.safe_load(own.read_text())
    target = node / "etc" / "cluster-kubelet.yaml"
    doc["node"]["clusterKubeletConfig"] = str(target)  # need not exist before the join
    own.write_text(yaml.safe_dump(doc))
    assert join(node, *PINNED, steps=FakeSteps(api=published()))[0] == 0
    assert yaml.safe_load(target.read_text())["clusterDNS"] == ["10.96.0.10"]
    assert not (node / "var" / "kubelet-config.yaml").exists()


def test_a_missing_configmap_is_said_and_the_join_goes_on_without_it(node: Path) -> None:
    code, out, _ = join(node, *PINNED, steps=FakeSteps(api=FakeApiServer()))
    assert code == 0
    assert "ConfigMap kube-system/kubelet-config does not exist: no cluster-wide kubelet" in out
    assert "kubeadm would stop here" in out
    assert not (node / "var" / "kubelet-config.yaml").exists()
    flags = read_flags_env(node / "var" / "join-flags.env")
    assert not any(f.startswith("--cluster-kubelet-config") for f in flags)


def test_a_configmap_the_token_may_not_read_is_said_and_the_join_goes_on(node: Path) -> None:
    api = FakeApiServer()
    api.react("get", "configmaps", Forbidden("configmaps is forbidden"))
    code, out, _ = join(node, *PINNED, steps=FakeSteps(api=api))
    assert code == 0
    assert "may not get ConfigMap kube-system/kubelet-config (403)" in out
    assert "kubeadm:kubelet-config" in out
    assert not (node / "var" / "kubelet-config.yaml").exists()


def test_a_failed_request_stops_the_join_and_writes_nothing(node: Path) -> None:
    api = FakeApiServer()
    api.react("get", "configmaps", ServerError("etcdserver: request timed out"))
    code, _, err = join(node, *PINNED, steps=FakeSteps(api=api))
    assert code == 1
    assert "cannot get ConfigMap kube-system/kubelet-config" in err
    assert "etcdserver: request timed out" in err
    assert written(node) == []


@pytest.mark.parametrize(
    ("text", "names"),
    [
        (KUBELET + "maxPods: lots\n", ('key "kubelet":10: maxPods', '"lots"')),
        (KUBELET.replace("- 10.96.0.10", "- 10.96.0.999"), ('key "kubelet":4: clusterDNS',)),
        (KUBELET.replace("KubeletConfiguration", "KubeProxyConfiguration"), (":2: kind",)),
        ("clusterDNS: [", ('key "kubelet"', "invalid YAML")),
        ("- a list\n", ('key "kubelet"', "mapping")),
    ],
)
def test_a_malformed_configmap_is_refused_naming_the_key_and_field_and_nothing_is_written(
    node: Path, text: str, names: tuple[str, ...]
) -> None:
    code, _, err = join(node, *PINNED, steps=FakeSteps(api=published(text)))
    assert code == 1, err
    assert "ConfigMap kube-system/kubelet-config" in err
    for name in names:
        assert name in err
    assert "nothing was written" in err
    assert written(node) == []


def test_a_configmap_without_the_key_is_refused(node: Path) -> None:
    code, _, err = join(node, *PINNED, steps=FakeSteps(api=published(None, other="x")))
    assert code == 1
    assert 'ConfigMap kube-system/kubelet-config has no key "kubelet"' in err
    assert "its keys: other" in err
    assert written(node) == []


def test_unimplemented_fields_are_left_out_with_a_warning(node: Path) -> None:
    text = KUBELET + "cpuManagerPolicy: static\ncpuManagerReconcilePeriod: 0s\n"
    code, out, _ = join(node, *PINNED, steps=FakeSteps(api=published(text)))
    assert code == 0
    assert "WARNING: left out of" in out and 'not implement: cpuManagerPolicy: "static"' in out
    written_text = (node / "var" / "kubelet-config.yaml").read_text()
    assert '#   cpuManagerPolicy: "static"' in written_text
    assert "cpuManagerReconcilePeriod" not in written_text
    assert effective(node).kubelet.cluster_dns == ("10.96.0.10",)  # the file loads


def test_the_token_never_reaches_the_written_configuration(node: Path) -> None:
    assert join(node, *PINNED, steps=FakeSteps(api=published()))[0] == 0
    assert TOKEN.split(".")[1] not in (node / "var" / "kubelet-config.yaml").read_text()
