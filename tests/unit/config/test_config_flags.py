"""Kubelet-compatible flags override the file; bad flag values are named by the flag."""

from __future__ import annotations

from pathlib import Path

import pytest
from config_loading import Fail, Load, parse_flags

from nodeagent.config import Taint
from nodeagent.config.flags import FLAGS

FILE = (
    "node:\n"
    "  nodeIP: 10.0.0.1\n"
    "  nodeLabels: {from-file: 'yes'}\n"
    "kubelet:\n"
    "  maxPods: 50\n"
    "  registerNode: true\n"
    "  logging: {verbosity: 1}\n"
)


def test_flags_default_to_none_so_absent_is_distinguishable() -> None:
    args = parse_flags()
    assert args.config is None
    assert all(getattr(args, flag.dest) is None for flag in FLAGS)


def test_flags_override_the_file_and_leave_other_fields_alone(load: Load) -> None:
    cfg = load(FILE, "--node-ip", "10.0.0.2", "-v", "4", "--hostname-override", "worker-1")
    assert cfg.node.node_ip == "10.0.0.2"
    assert cfg.kubelet.logging.verbosity == 4
    assert cfg.node.hostname_override == "worker-1"
    assert cfg.kubelet.max_pods == 50  # from the file
    assert cfg.node.node_labels == {"from-file": "yes"}


def test_file_values_stay_when_no_flag_is_given(load: Load) -> None:
    cfg = load(FILE)
    assert (cfg.node.node_ip, cfg.kubelet.logging.verbosity, cfg.kubelet.register_node) == (
        "10.0.0.1",
        1,
        True,
    )


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        pytest.param(["--register-node=false"], False, id="--register-node=false"),
        pytest.param(["--register-node=False"], False, id="Go spelling False"),
        pytest.param(["--register-node=0"], False, id="--register-node=0"),
        pytest.param(["--register-node"], True, id="bare flag means true"),
        pytest.param(["--register-node=true"], True, id="--register-node=true"),
        pytest.param([], True, id="absent keeps the file value"),
    ],
)
def test_register_node_flag(load: Load, argv: list[str], expected: bool) -> None:
    assert load(FILE, *argv).kubelet.register_node is expected


@pytest.mark.parametrize("argv", [["-v", "3"], ["-v=3"], ["-v3"], ["--v=3"], ["--v", "3"]])
def test_verbosity_flag_spellings(load: Load, argv: list[str]) -> None:
    assert load(None, *argv).kubelet.logging.verbosity == 3


def test_node_labels_flag_replaces_file_labels_and_merges_repeats(load: Load) -> None:
    cfg = load(FILE, "--node-labels", "a=1,node.kubernetes.io/pool=gpu", "--node-labels", "b=2")
    assert cfg.node.node_labels == {"a": "1", "node.kubernetes.io/pool": "gpu", "b": "2"}


def test_register_with_taints_flag(load: Load) -> None:
    cfg = load(None, "--register-with-taints", "dedicated=gpu:NoSchedule,spot:PreferNoSchedule")
    assert cfg.kubelet.register_with_taints == (
        Taint(key="dedicated", value="gpu", effect="NoSchedule"),
        Taint(key="spot", value="", effect="PreferNoSchedule"),
    )


def test_relative_path_flags_are_taken_from_the_current_directory(
    load: Load, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    cfg = load(None, "--root-dir", "state", "--kubeconfig", "kc")
    assert cfg.node.root_dir == str(tmp_path / "state")
    assert cfg.node.kubeconfig == str(tmp_path / "kc")


def test_container_runtime_endpoint_flag(load: Load) -> None:
    cfg = load(None, "--container-runtime-endpoint", "unix:///run/crio/crio.sock")
    assert cfg.kubelet.container_runtime_endpoint == "unix:///run/crio/crio.sock"


@pytest.mark.parametrize(
    ("argv", "flag", "value", "allowed"),
    [
        pytest.param(
            ["--node-ip", "1.2.3"], "--node-ip", "1.2.3", "is not an IP address", id="node IP"
        ),
        pytest.param(
            ["--register-node=maybe"],
            "--register-node",
            "maybe",
            "true or false",
            id="register-node not a boolean",
        ),
        pytest.param(["-v", "loud"], "--v", "loud", "is not an integer", id="verbosity"),
        pytest.param(["-v", "-1"], "--v", "-1", "must be >= 0", id="negative verbosity"),
        pytest.param(
            ["--node-labels", "novalue"],
            "--node-labels",
            "novalue",
            "key=value",
            id="label without =",
        ),
        pytest.param(
            ["--node-labels", "node-role.kubernetes.io/worker="],
            "--node-labels",
            "node-role.kubernetes.io/worker",
            "must begin with an allowed prefix",
            id="label the kubelet may not set",
        ),
        pytest.param(
            ["--register-with-taints", "dedicated=gpu"],
            "--register-with-taints",
            "dedicated=gpu",
            "key[=value]:Effect",
            id="taint without effect",
        ),
        pytest.param(
            ["--register-with-taints", "a:Sometimes"],
            "--register-with-taints",
            "Sometimes",
            '"NoSchedule"',
            id="taint with unknown effect",
        ),
        pytest.param(
            ["--container-runtime-endpoint", "tcp://x:1"],
            "--container-runtime-endpoint",
            "tcp://x:1",
            "unix:///",
            id="runtime endpoint",
        ),
        pytest.param(
            ["--hostname-override", "Not_A_Name"],
            "--hostname-override",
            "Not_A_Name",
            "RFC 1123 subdomain",
            id="hostname override",
        ),
    ],
)
def test_bad_flag_is_named_by_the_flag(
    fail: Fail, argv: list[str], flag: str, value: str, allowed: str
) -> None:
    err = fail(FILE, *argv)
    assert err.path == flag
    assert err.source == ""  # not blamed on the file
    assert value in str(err)
    assert allowed in str(err)


def test_flag_and_file_problems_are_reported_together(fail: Fail) -> None:
    err = fail("kubelet:\n  maxPods: 0\n", "--node-ip", "1.2.3")
    assert sorted(e.path for e in err.all) == ["--node-ip", "kubelet.maxPods"]


def test_registry_pull_rate_flags_and_defaults(load: Load) -> None:
    default = load(None).kubelet
    assert (default.registry_pull_qps, default.registry_burst) == (5, 10)  # the kubelet's
    cfg = load("kubelet:\n  registryPullQPS: 2\n", "--registry-burst", "4").kubelet
    assert (cfg.registry_pull_qps, cfg.registry_burst) == (2, 4)
    assert load(None, "--registry-qps=0").kubelet.registry_pull_qps == 0
