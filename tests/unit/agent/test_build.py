"""Which managers the composition root wires for a configuration."""

from __future__ import annotations

from pathlib import Path

import pytest

from nodeagent import agent, config
from nodeagent.__main__ import build_parser


def _config(tmp_path: Path, *flags: str) -> config.Config:
    args = build_parser().parse_args(["run", "--root-dir", str(tmp_path / "root"), *flags])
    return config.resolve(args)


def test_without_any_kubeconfig_the_agent_runs_standalone(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    cfg = _config(tmp_path, "--kubeconfig", str(tmp_path / "missing"))
    built = agent.build(cfg, environ={})
    # standalone still holds the shutdown inhibitor lock, as the kubelet
    assert built.manager_names == ["standalone", "nodeshutdown"]
    assert "running standalone" in caplog.text


def test_with_a_kubeconfig_file_the_node_managers_are_wired(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text("apiVersion: v1\nkind: Config\n")
    built = agent.build(_config(tmp_path, "--kubeconfig", str(kubeconfig)), environ={})
    assert "standalone" not in built.manager_names
    assert len(built.manager_names) > 3


def test_a_bootstrap_kubeconfig_alone_selects_api_server_mode(tmp_path: Path) -> None:
    boot = tmp_path / "bootstrap"
    boot.write_text("apiVersion: v1\nkind: Config\n")
    cfg = _config(
        tmp_path, "--kubeconfig", str(tmp_path / "missing"), "--bootstrap-kubeconfig", str(boot)
    )
    assert "standalone" not in agent.build(cfg, environ={}).manager_names


def test_the_node_serves_the_kubelet_api(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text("apiVersion: v1\nkind: Config\n")
    built = agent.build(_config(tmp_path, "--kubeconfig", str(kubeconfig)), environ={})
    assert "server" in built.manager_names


def _standalone(tmp_path: Path, kubelet: str) -> agent.Agent:
    manifests = tmp_path / "manifests"
    manifests.mkdir()
    cfg_file = tmp_path / "config.yaml"
    cfg_file.write_text(
        "apiVersion: nodeagent.io/v1alpha1\nkind: NodeAgentConfiguration\n"
        f"kubelet:\n  staticPodPath: {manifests}\n{kubelet}"
    )
    cfg = _config(tmp_path, "--config", str(cfg_file), "--kubeconfig", str(tmp_path / "none"))
    return agent.build(cfg, environ={})


def test_standalone_with_webhook_authorization_does_not_serve_and_says_why(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    built = _standalone(tmp_path, "")
    assert "server" not in built.manager_names
    assert "the kubelet API is not served" in caplog.text
    assert "kubelet.authorization.mode: Webhook" in caplog.text


def test_standalone_with_always_allow_serves(tmp_path: Path) -> None:
    built = _standalone(
        tmp_path,
        "  authorization: {mode: AlwaysAllow}\n  authentication: {webhook: {enabled: false}}\n",
    )
    assert "server" in built.manager_names
