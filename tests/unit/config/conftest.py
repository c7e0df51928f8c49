"""Fixtures: load a configuration from YAML text and command-line flags, as `nodeagent` does."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from config_loading import HEADER, Fail, Load, parse_flags

from nodeagent import config
from nodeagent.errors import ConfigError


@pytest.fixture
def write(tmp_path: Path) -> Callable[[str], Path]:
    """Write YAML to a file; the header is added unless the text has its own apiVersion."""

    def _write(text: str, *, header: bool = True) -> Path:
        path = tmp_path / "config.yaml"
        path.write_text((HEADER if header else "") + text, encoding="utf-8")
        return path

    return _write


@pytest.fixture
def load(write: Callable[..., Path]) -> Load:
    """``load(yaml_text_or_None, *flags, header=True) -> Config``."""

    def _load(text: str | None, *flags: str, header: bool = True) -> config.Config:
        argv = list(flags)
        if text is not None:
            argv = ["--config", str(write(text, header=header)), *argv]
        return config.resolve(parse_flags(*argv))

    return _load


@pytest.fixture
def fail(load: Load) -> Fail:
    """Like ``load`` but expects a ConfigError and returns it."""

    def _fail(text: str | None, *flags: str, header: bool = True) -> ConfigError:
        with pytest.raises(ConfigError) as info:
            load(text, *flags, header=header)
        return info.value

    return _fail
