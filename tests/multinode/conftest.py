"""The multi-node tier: one 3-node cluster per session (`harness.testcluster`), its own control
plane, registry and nodes in namespaces of their own with flannel between them, removed at the
end even when a test fails. `make multinode` runs every test here; `make test` runs the ones
marked `smoke` (`make multinode-smoke`)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from harness.multinode import Cluster
from harness.testcluster import multinode_cluster


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    logs: Path = tmp_path_factory.mktemp("multinode-logs")
    with multinode_cluster(count=3, log_dir=logs) as c:
        yield c


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> object:
    """On failure, the tail of every node's agent log."""
    report = yield
    c = item.funcargs.get("cluster") if hasattr(item, "funcargs") else None
    if report.when == "call" and report.failed and isinstance(c, Cluster):
        for node in c.nodes:
            text = node.agent_log.read_text(errors="replace") if node.agent_log.exists() else ""
            report.sections.append((f"nodeagent {node.name}", text[-12000:]))
    return report
