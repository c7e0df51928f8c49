"""The CI subset's focus: exactly the listed specs, their brackets and dots taken literally."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from conformance.__main__ import ci_focus

HOST_IP = "[sig-node] Pods should get a host IP [NodeConformance] [Conformance]"
HOOK = "[sig-node] Container Lifecycle Hook should execute prestop http hook properly"


def test_the_focus_matches_exactly_the_listed_specs(tmp_path: Path) -> None:
    listed = tmp_path / "ci-specs.txt"
    listed.write_text(f"# a comment\n{HOST_IP}\n\n{HOOK}\n")

    focus = re.compile(ci_focus(listed))

    assert focus.search(HOST_IP)
    assert focus.search(HOOK)
    # what ginkgo matches a focus against: the suite's description, a space, the spec's text
    assert focus.search(f"Kubernetes e2e suite {HOST_IP}")
    assert not focus.search(f"Kubernetes e2e suite x{HOST_IP}")
    assert not focus.search(HOST_IP + " and more")
    assert not focus.search("[sig-node] Pods should get a host IP")
    assert not focus.search("# a comment")


def test_an_empty_list_is_refused(tmp_path: Path) -> None:
    listed = tmp_path / "ci-specs.txt"
    listed.write_text("# nothing yet\n")

    with pytest.raises(SystemExit, match="lists no specs"):
        ci_focus(listed)
