"""``nodeagent shutdown plan`` over a PodList file."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from nodeagent.__main__ import build_parser
from nodeagent.nodeshutdown import cli
from nodeagent.testing.pods import pod_object

CONFIG = """\
apiVersion: nodeagent.io/v1alpha1
kind: NodeAgentConfiguration
kubelet:
  shutdownGracePeriodByPodPriority:
    - {priority: 0, shutdownGracePeriodSeconds: 10}
    - {priority: 100000, shutdownGracePeriodSeconds: 5}
"""


def _run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, limit: float | None) -> tuple[int, str]:
    async def inhibit_delay_max() -> float | None:
        return limit

    monkeypatch.setattr(cli, "_inhibit_delay_max", inhibit_delay_max)
    (tmp_path / "config.yaml").write_text(CONFIG)
    done = pod_object("done")
    done["status"]["phase"] = "Succeeded"
    pods = {
        "items": [
            pod_object("web", grace=30),
            pod_object("db", grace=3, priority=100000),
            done,
        ]
    }
    (tmp_path / "pods.json").write_text(json.dumps(pods))
    args = build_parser().parse_args(
        ["shutdown", "plan", "--config", str(tmp_path / "config.yaml"),
         "--pods", str(tmp_path / "pods.json")]
    )  # fmt: skip
    out, err = io.StringIO(), io.StringIO()
    code = cli.run(args, out=out, err=err)
    return code, out.getvalue()


def test_plan_prints_groups_graces_and_the_total_against_logind(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    code, text = _run(tmp_path, monkeypatch, limit=5.0)
    assert code == 0
    assert text == (
        "group 1: priority >= 0, budget 10s, 1 pod(s)\n"
        "  default/web: priority 0, grace 10s (own 30s)"
        "  WARNING: its own grace 30s is cut to the group's 10s\n"
        "group 2: priority >= 100000, budget 5s, 1 pod(s)\n"
        "  default/db: priority 100000, grace 3s (own 3s)\n"
        "total: 15s\n"
        "logind InhibitDelayMaxSec: 5s (too short: the agent raises it with a drop-in when it"
        " starts)\n"
    )


def test_plan_without_logind_says_unknown(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    code, text = _run(tmp_path, monkeypatch, limit=None)
    assert code == 0
    assert text.endswith("logind InhibitDelayMaxSec: unknown (logind not reachable)\n")
