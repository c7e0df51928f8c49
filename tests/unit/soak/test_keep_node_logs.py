"""A soak run keeps its nodes' logs in its output directory (``soak.__main__.keep_node_logs``)."""

from __future__ import annotations

from pathlib import Path

import pytest
from soak.__main__ import keep_node_logs


def test_the_nodes_logs_are_copied_into_the_run_directory(tmp_path: Path) -> None:
    source = tmp_path / "na-mn-x" / "nodes" / "logs"
    source.mkdir(parents=True)
    (source / "nodeagent-node-1.log").write_text("I1129 started\n")
    (source / "containerd-node-1.log").write_text("level=info\n")
    target = tmp_path / "run" / "logs" / "nodes"
    target.parent.mkdir(parents=True)
    (target.parent / "kube-apiserver.log").write_text("kept\n")
    keep_node_logs(source, target)
    assert sorted(p.name for p in target.iterdir()) == [
        "containerd-node-1.log",
        "nodeagent-node-1.log",
    ]
    assert (target / "nodeagent-node-1.log").read_text() == "I1129 started\n"
    assert (target.parent / "kube-apiserver.log").read_text() == "kept\n"


def test_a_copy_that_fails_is_said_and_does_not_end_the_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    keep_node_logs(tmp_path / "gone", tmp_path / "run" / "logs" / "nodes")
    assert "the nodes' logs were not kept" in capsys.readouterr().out
