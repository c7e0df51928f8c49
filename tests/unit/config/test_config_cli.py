"""`nodeagent config show | validate | reference` and `nodeagent run` with a bad config."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import yaml
from config_loading import parse_flags

from nodeagent import config
from nodeagent.__main__ import main
from nodeagent.config.decode import decode
from nodeagent.config.yamldoc import parse

REPO = Path(__file__).resolve().parents[3]
BAD = "kubelet:\n  shutdownGracePeriod: 10s\n  shutdownGracePeriodCriticalPods: 15s\n"
Write = Callable[..., Path]


def test_show_prints_every_default(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["config", "show"]) == 0
    out = capsys.readouterr().out
    shown = yaml.safe_load(out)
    assert shown["apiVersion"] == "nodeagent.io/v1alpha1"
    assert shown["kubelet"]["maxPods"] == 110
    assert shown["kubelet"]["nodeStatusReportFrequency"] == "5m0s"
    assert shown["kubelet"]["evictionHard"]["memory.available"] == "100Mi"
    assert shown["proxy"]["masqueradeBit"] == 14


def test_show_includes_file_and_flag_values(
    write: Write, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write("kubelet:\n  maxPods: 30\n")
    assert main(["config", "show", "--config", str(path), "--register-node=false"]) == 0
    shown = yaml.safe_load(capsys.readouterr().out)
    assert (shown["kubelet"]["maxPods"], shown["kubelet"]["registerNode"]) == (30, False)


def test_show_output_loads_back_to_the_same_config(
    write: Write, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sample = REPO / "nodeagent" / "config" / "sample.yaml"
    argv = [
        "--config",
        str(sample),
        "--node-labels",
        "a=b",
        "--register-with-taints",
        "k=v:NoExecute",
        "--node-ip",
        "10.1.2.3",
        "-v",
        "5",
    ]
    assert main(["config", "show", *argv]) == 0
    shown = capsys.readouterr().out
    effective = config.resolve(parse_flags(*argv))
    assert decode(parse(shown).data) == effective
    again = tmp_path / "again.yaml"
    again.write_text(shown)
    assert main(["config", "show", "--config", str(again)]) == 0
    assert capsys.readouterr().out == shown


def test_invalid_config_show_exits_2_naming_the_field(
    write: Write, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(BAD)
    assert main(["config", "show", "--config", str(path)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert "kubelet.shutdownGracePeriodCriticalPods (15s) must be <= " in captured.err
    assert f"{path}:5:" in captured.err


def test_validate_exits_0_for_a_good_file_and_2_for_a_bad_one(
    write: Write, capsys: pytest.CaptureFixture[str]
) -> None:
    good = write("kubelet:\n  maxPods: 30\n")
    assert main(["config", "validate", "--config", str(good)]) == 0
    assert capsys.readouterr() == ("", "")
    bad = write("kubelet:\n  maxPods: 0\n")
    assert main(["config", "validate", "--config", str(bad)]) == 2
    assert "kubelet.maxPods: 0 must be between 1 and" in capsys.readouterr().err


def test_validate_reports_a_missing_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "nope.yaml"
    assert main(["config", "validate", "--config", str(missing)]) == 2
    assert f"--config: cannot read {missing}: No such file or directory" in capsys.readouterr().err


def test_bad_flag_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["config", "validate", "--node-ip", "300.1.1.1"]) == 2
    assert '--node-ip: "300.1.1.1" is not an IP address' in capsys.readouterr().err


def test_run_refuses_an_invalid_config_before_starting(
    write: Write, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(BAD)
    assert main(["run", "--config", str(path)]) == 2
    err = capsys.readouterr().err
    assert "kubelet.shutdownGracePeriodCriticalPods" in err
    assert "Starting" not in err


def test_config_without_subcommand_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["config"]) == 2
    assert "show" in capsys.readouterr().err


def test_reference_command_prints_the_committed_reference(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["config", "reference"]) == 0
    printed = capsys.readouterr().out
    committed = (REPO / "docs" / "configuration.md").read_text(encoding="utf-8")
    assert printed == committed, (
        "docs/configuration.md is stale: run "
        "`.venv/bin/python -m nodeagent config reference > docs/configuration.md`"
    )


def test_reference_documents_every_field() -> None:
    text = config.reference()
    for path in (
        "kubelet.shutdownGracePeriodByPodPriority[].priority",
        "kubelet.memorySwap.swapBehavior",
        "kubelet.authentication.x509.clientCAFile",
        "node.nodeLabels",
        "proxy.conntrack.udpTimeout",
        "kubelet.logging.verbosity",
    ):
        assert f"| `{path}` |" in text
    assert "| `--register-node` | `kubelet.registerNode` |" in text
