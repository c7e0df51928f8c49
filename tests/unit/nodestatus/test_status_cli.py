"""``nodeagent status`` reads the state file the agent writes and prints it for humans."""

from __future__ import annotations

import argparse
import datetime as dt
import io
import json
import os
from pathlib import Path

import pytest

from nodeagent.certificate.csr import CertInfo
from nodeagent.nodestatus import cli
from nodeagent.nodestatus.report import STATE_FILE, NodeReport
from nodeagent.testing.fake_apiserver import EPOCH, LoopClock

pytestmark = pytest.mark.looptime

NOW = EPOCH + dt.timedelta(seconds=12)


def args(root: Path, *, as_json: bool = False) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    cli.register(parser.add_subparsers())
    argv = ["status", "--root-dir", str(root)] + (["--json"] if as_json else [])
    return parser.parse_args(argv)


async def write_state(root: Path) -> None:
    report = NodeReport(path=root / STATE_FILE, node_name="n1", clock=LoopClock())
    report.status_reported(
        {
            "metadata": {"uid": "u-1"},
            "status": {
                "addresses": [
                    {"type": "InternalIP", "address": "10.0.0.5"},
                    {"type": "Hostname", "address": "n1"},
                ],
                "nodeInfo": {
                    "kubeletVersion": "v1.36.3+nodeagent.0.1.0",
                    "containerRuntimeVersion": "unknown",
                },
                "conditions": [
                    {
                        "type": "MemoryPressure",
                        "status": "False",
                        "reason": "KubeletHasSufficientMemory",
                        "message": "kubelet has sufficient memory available",
                        "lastTransitionTime": "2026-01-01T00:00:00Z",
                    },
                    {
                        "type": "Ready",
                        "status": "False",
                        "reason": "KubeletNotReady",
                        "message": "container runtime status check may not have completed yet",
                        "lastTransitionTime": "2026-01-01T00:00:00Z",
                    },
                ],
            },
        }
    )
    report.lease_renewed(
        {
            "metadata": {"name": "n1", "namespace": "kube-node-lease"},
            "spec": {
                "holderIdentity": "n1",
                "leaseDurationSeconds": 40,
                "renewTime": "2026-01-01T00:00:10.000000Z",
            },
        }
    )
    report.credentials(
        CertInfo(
            subject="CN=system:node:n1,O=system:nodes",
            not_before=EPOCH,
            not_after=EPOCH + dt.timedelta(days=365),
        )
    )
    await report.write()


async def test_status_prints_conditions_lease_patch_and_credential_expiry(tmp_path: Path) -> None:
    await write_state(tmp_path)
    out = io.StringIO()

    code = cli.run(args(tmp_path), out=out, now=lambda: NOW)

    assert code == cli.EXIT_OK  # written by this (alive) process
    assert out.getvalue() == (
        f"Node:          n1  (nodeagent 0.1.0, pid {os.getpid()})\n"
        "State written: 2026-01-01T00:00:00Z (12s ago)\n"
        "Kubelet:       v1.36.3+nodeagent.0.1.0  runtime unknown\n"
        "Addresses:     InternalIP=10.0.0.5, Hostname=n1\n"
        "Conditions:\n"
        "  TYPE            STATUS  REASON                      SINCE"
        "                           MESSAGE\n"
        "  MemoryPressure  False   KubeletHasSufficientMemory  2026-01-01T00:00:00Z (12s ago)"
        "  kubelet has sufficient memory available\n"
        "  Ready           False   KubeletNotReady             2026-01-01T00:00:00Z (12s ago)"
        "  container runtime status check may not have completed yet\n"
        "Lease:         kube-node-lease/n1 renewed 2026-01-01T00:00:10.000000Z (2s ago), "
        "duration 40s\n"
        "Status patch:  2026-01-01T00:00:00Z (12s ago)\n"
        "Credentials:   CN=system:node:n1,O=system:nodes, expires 2027-01-01T00:00:00Z (in 364d)\n"
    )


async def test_status_json_is_the_state_file(tmp_path: Path) -> None:
    await write_state(tmp_path)
    out = io.StringIO()
    cli.run(args(tmp_path, as_json=True), out=out, now=lambda: NOW)

    state = json.loads(out.getvalue())
    assert state == json.loads((tmp_path / STATE_FILE).read_text())
    assert state["lease"]["renewTime"] == "2026-01-01T00:00:10.000000Z"
    assert state["credentials"]["notAfter"] == "2027-01-01T00:00:00Z"


def test_missing_state_says_where_it_looked(tmp_path: Path) -> None:
    err = io.StringIO()
    assert cli.run(args(tmp_path), err=err) == cli.EXIT_NO_STATE
    assert f"no node state at {tmp_path / STATE_FILE}" in err.getvalue()


@pytest.mark.parametrize("pid", [0, 2**22 + 1], ids=["no pid", "a pid that is not running"])
async def test_state_left_by_a_stopped_agent_is_flagged(tmp_path: Path, pid: int) -> None:
    await write_state(tmp_path)
    path = tmp_path / STATE_FILE
    path.write_text(json.dumps({**json.loads(path.read_text()), "pid": pid}))
    out = io.StringIO()

    assert cli.run(args(tmp_path), out=out, now=lambda: NOW) == cli.EXIT_STALE
    assert "NOT RUNNING" in out.getvalue().splitlines()[0]
