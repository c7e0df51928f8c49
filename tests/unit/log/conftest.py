"""Fixtures: a fake journald per test, and logging restored after each test."""

from __future__ import annotations

import io
from collections.abc import Iterator
from pathlib import Path

import pytest
from fake_journald import FakeJournald

from nodeagent import log


@pytest.fixture(autouse=True)
def _restore_logging() -> Iterator[None]:
    yield
    log.reset()


@pytest.fixture
def journald(tmp_path: Path) -> Iterator[FakeJournald]:
    fake = FakeJournald(tmp_path / "journal.sock")
    yield fake
    fake.close()


@pytest.fixture
def stderr() -> io.StringIO:
    return io.StringIO()


@pytest.fixture
def to_journald(journald: FakeJournald, stderr: io.StringIO) -> FakeJournald:
    """Logging set up to write to the fake journald (stderr only as the fallback)."""
    log.setup(verbosity=0, environ={}, stream=stderr, target="journald",
              journal_socket=journald.path)  # fmt: skip
    return journald
