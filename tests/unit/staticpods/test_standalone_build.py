"""Without credentials but with a staticPodPath, the agent runs the static pods standalone."""

from __future__ import annotations

from pathlib import Path

import yaml

from nodeagent import agent, config
from nodeagent.__main__ import build_parser


def test_a_standalone_node_with_a_static_pod_path_runs_the_pod_managers(tmp_path: Path) -> None:
    cfg = tmp_path / "config.yaml"
    cfg.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "nodeagent.io/v1alpha1",
                "kind": "NodeAgentConfiguration",
                "node": {"rootDir": str(tmp_path / "root"), "hostnameOverride": "solo"},
                "kubelet": {"staticPodPath": str(tmp_path / "manifests")},
            }
        )
    )
    args = build_parser().parse_args(
        ["run", "--config", str(cfg), "--kubeconfig", str(tmp_path / "missing")]
    )
    names = agent.build(config.resolve(args), environ={}).manager_names
    assert "staticpods:file" in names and "pods" in names
    assert "staticpods:mirror" not in names and "cache:pods" not in names
    assert "standalone" not in names
