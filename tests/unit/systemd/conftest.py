"""Fixtures: a real NOTIFY_SOCKET listener per test, at a tmp path or an abstract name."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from sd_listener import NotifyListener


@pytest.fixture
def notify_listener(tmp_path: Path) -> Iterator[NotifyListener]:
    listener = NotifyListener(env_value=str(tmp_path / "notify.sock"))
    yield listener
    listener.close()


@pytest.fixture
def abstract_notify_listener() -> Iterator[NotifyListener]:
    listener = NotifyListener(env_value=f"@nodeagent-test-{uuid.uuid4().hex}")
    yield listener
    listener.close()
