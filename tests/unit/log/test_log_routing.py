"""Which sink setup() picks: journald when systemd says stderr is the journal, else stderr."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TextIO

import pytest
from fake_journald import FakeJournald

from nodeagent import log


@pytest.fixture
def stderr_file(tmp_path: Path) -> Iterator[TextIO]:
    with (tmp_path / "stderr").open("w") as f:
        yield f


def journal_stream(f: TextIO, *, inode_delta: int = 0) -> str:
    st = os.fstat(f.fileno())
    return f"{st.st_dev}:{st.st_ino + inode_delta}"


def test_journal_stream_naming_our_stderr_selects_journald(
    journald: FakeJournald, stderr_file: TextIO
) -> None:
    environ = {"JOURNAL_STREAM": journal_stream(stderr_file)}
    log.setup(environ=environ, stream=stderr_file, journal_socket=journald.path)

    log.get_logger("t").info("to the journal", pod_name="web-0")

    assert journald.receive()["POD_NAME"] == "web-0"
    stderr_file.flush()
    assert Path(stderr_file.name).read_text() == ""


@pytest.mark.parametrize(
    "environ",
    [
        pytest.param(lambda f: {}, id="no JOURNAL_STREAM"),
        pytest.param(lambda f: {"JOURNAL_STREAM": journal_stream(f, inode_delta=1)},
                     id="JOURNAL_STREAM names another stream (stderr redirected)"),
        pytest.param(lambda f: {"JOURNAL_STREAM": "garbage"}, id="malformed JOURNAL_STREAM"),
    ],
)  # fmt: skip
def test_otherwise_lines_go_to_stderr(
    journald: FakeJournald, stderr_file: TextIO, environ: Callable[[TextIO], dict[str, str]]
) -> None:
    log.setup(environ=environ(stderr_file), stream=stderr_file, journal_socket=journald.path)

    log.get_logger("t").info("to stderr", pod_name="web-0")

    stderr_file.flush()
    assert Path(stderr_file.name).read_text().endswith('] "to stderr" pod_name=web-0\n')
    assert journald.pending() == 0


def test_missing_journal_socket_falls_back_to_stderr_and_says_so(
    stderr_file: TextIO, tmp_path: Path
) -> None:
    missing = str(tmp_path / "journal.sock")
    log.setup(environ={"JOURNAL_STREAM": journal_stream(stderr_file)}, stream=stderr_file,
              journal_socket=missing)  # fmt: skip

    log.get_logger("t").info("still visible")

    stderr_file.flush()
    lines = Path(stderr_file.name).read_text().splitlines()
    assert lines[0].startswith("W")
    assert lines[0].endswith(f'] "journald socket not found; logging to stderr" socket={missing}')
    assert lines[1].endswith('] "still visible"')


def test_stderr_target_ignores_journal_stream(journald: FakeJournald, stderr_file: TextIO) -> None:
    environ = {"JOURNAL_STREAM": journal_stream(stderr_file)}
    log.setup(environ=environ, stream=stderr_file, target="stderr", journal_socket=journald.path)

    log.get_logger("t").warning("plain")

    stderr_file.flush()
    assert Path(stderr_file.name).read_text().endswith('] "plain"\n')
    assert journald.pending() == 0


def test_library_warnings_reach_the_same_sink(journald: FakeJournald) -> None:
    log.setup(environ={}, target="journald", journal_socket=journald.path)

    logging.getLogger("asyncio").warning("Task was destroyed but it is pending!")
    logging.getLogger("asyncio").info("not at the default level")

    entry = journald.receive()
    assert (entry["MESSAGE"], entry["PRIORITY"], entry["LOGGER"]) == (
        "Task was destroyed but it is pending!", "4", "asyncio",
    )  # fmt: skip
    assert journald.pending() == 0


def test_setup_again_replaces_the_previous_sink(
    journald: FakeJournald, stderr_file: TextIO
) -> None:
    log.setup(environ={}, target="journald", journal_socket=journald.path)
    log.setup(environ={}, stream=stderr_file)

    log.get_logger("t").info("once")

    stderr_file.flush()
    assert Path(stderr_file.name).read_text().count('"once"') == 1
    assert journald.pending() == 0
