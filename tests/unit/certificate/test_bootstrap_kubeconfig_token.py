"""A YAML error in the bootstrap kubeconfig must not put the token in any log line."""

from __future__ import annotations

import logging
import traceback
from pathlib import Path

import pytest

from nodeagent.apiserver import load_kubeconfig
from nodeagent.errors import ConfigError

TOKEN = "07401b.f395accd246ae52d"

BROKEN = [
    pytest.param(
        f"users:\n- name: u\n  user:\n    token: {TOKEN}\n   bad: indent\n", id="bad indent"
    ),
    pytest.param(f"users:\n- name: u\n  user: {{token: {TOKEN}\n", id="unclosed flow mapping"),
    pytest.param(f'users:\n- name: u\n  user:\n    token: "{TOKEN}\n', id="unclosed quote"),
    pytest.param(f"users:\n- name: u\n  user:\n    token: {TOKEN}\t: x\n", id="tab after token"),
    pytest.param(f"users:\n- name: u\n  user:\n    token: *{TOKEN}\n", id="token as an alias"),
    pytest.param(f"users:\n- name: u\n  user:\n    token: {TOKEN}\x07\n", id="control char"),
]


@pytest.mark.parametrize("text", BROKEN)
def test_yaml_error_in_bootstrap_kubeconfig_never_shows_the_token(
    tmp_path: Path, text: str, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "bootstrap-kubeconfig"
    path.write_text(text)
    with pytest.raises(ConfigError) as caught:
        load_kubeconfig(path)
    logging.getLogger("test").exception("cannot load", exc_info=caught.value)
    everything = "".join(traceback.format_exception(caught.value)) + caplog.text
    assert TOKEN not in everything
    assert "07401b" not in everything and "f395accd246ae52d" not in everything
    assert str(caught.value).startswith(f"{path}: kubeconfig: not valid YAML")


def test_yaml_error_still_says_where(tmp_path: Path) -> None:
    path = tmp_path / "bootstrap-kubeconfig"
    path.write_text(f"users:\n- name: u\n  user: {{token: {TOKEN}\n")
    with pytest.raises(ConfigError) as caught:
        load_kubeconfig(path)
    assert str(caught.value) == (
        f"{path}: kubeconfig: not valid YAML at line 4, column 1: while parsing a flow "
        "mapping, expected ',' or '}', but got '<stream end>'"
    )


def test_control_character_is_located(tmp_path: Path) -> None:
    path = tmp_path / "bootstrap-kubeconfig"
    path.write_text(f"users:\n- name: u\n  user:\n    token: {TOKEN}\x07\n")
    with pytest.raises(ConfigError) as caught:
        load_kubeconfig(path)
    assert str(caught.value) == (
        f"{path}: kubeconfig: not valid YAML at character 59: "
        "control character U+0007 is not allowed"
    )
