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
    assert built.manager_names == ["standalone"]
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
