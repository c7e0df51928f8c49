"""Native journald entries as journald receives them: fields, call site, encodings."""

from __future__ import annotations

import inspect
import io
import socket
import struct
from pathlib import Path

import pytest
from fake_journald import FakeJournald

from nodeagent import log


def next_line() -> int:
    """The line after the caller's: where the logging call under test is."""
    frame = inspect.currentframe()
    assert frame is not None and frame.f_back is not None
    return frame.f_back.f_lineno + 1


def test_entry_has_priority_identifier_call_site_and_pod_fields(
    to_journald: FakeJournald,
) -> None:
    logger = log.get_logger("kubelet").bind(node="node-1")

    line = next_line()
    logger.info("Pod started", pod_namespace="default", pod_name="web-0",
                pod_uid="6b5c1f9e-0d1a-4b8e-9f3e-1c2d3e4f5a6b", container_name="nginx")  # fmt: skip

    entry = to_journald.receive()
    assert {name: entry[name] for name in entry.fields} == {
        "MESSAGE": "Pod started",
        "PRIORITY": "6",
        "SYSLOG_IDENTIFIER": "nodeagent",
        "CODE_FILE": __file__,
        "CODE_LINE": str(line),
        "CODE_FUNC": "test_entry_has_priority_identifier_call_site_and_pod_fields",
        "LOGGER": "nodeagent.kubelet",
        "NODE": "node-1",
        "POD_NAMESPACE": "default",
        "POD_NAME": "web-0",
        "POD_UID": "6b5c1f9e-0d1a-4b8e-9f3e-1c2d3e4f5a6b",
        "CONTAINER_NAME": "nginx",
    }
    assert entry.binary == set()


@pytest.mark.parametrize(
    ("method", "priority"),
    [("debug", "7"), ("info", "6"), ("warning", "4"), ("error", "3")],
)
def test_priority_follows_the_level(journald: FakeJournald, method: str, priority: str) -> None:
    log.setup(verbosity=4, environ={}, stream=io.StringIO(), target="journald",
              journal_socket=journald.path)  # fmt: skip

    getattr(log.get_logger("t"), method)("hello")

    assert journald.receive()["PRIORITY"] == priority


def test_multi_line_values_use_the_length_prefixed_form(to_journald: FakeJournald) -> None:
    log.get_logger("t").info("first line\nsecond line", reason="a\nb", plain="x=y")

    entry = to_journald.receive()
    assert entry["MESSAGE"] == "first line\nsecond line"
    assert entry["REASON"] == "a\nb"
    assert entry["PLAIN"] == "x=y"
    assert entry.binary == {"MESSAGE", "REASON"}
    assert entry.raw.startswith(b"MESSAGE\n" + struct.pack("<Q", 22) + b"first line\nsecond line\n")


def _fail() -> None:
    raise ValueError("disk on fire")


def test_exception_traceback_is_in_the_message(to_journald: FakeJournald) -> None:
    try:
        _fail()
    except ValueError:
        line = next_line()
        log.get_logger("t").exception("Sync failed", pod_name="web-0")

    entry = to_journald.receive()
    message = entry["MESSAGE"]
    assert message.startswith("Sync failed\nTraceback (most recent call last):\n")
    assert 'in _fail\n    raise ValueError("disk on fire")' in message
    assert message.endswith("\nValueError: disk on fire")
    assert entry["EXCEPTION_TYPE"] == "ValueError"
    assert entry["PRIORITY"] == "3"
    assert entry["CODE_LINE"] == str(line)
    assert entry["POD_NAME"] == "web-0"
    assert "MESSAGE" in entry.binary


def test_keys_that_are_not_journald_names_are_renamed_not_dropped(
    to_journald: FakeJournald,
) -> None:
    fields = {"podUID": "u", "_secret": "s", "3d": "d", "x-y.z": "x", "message": "m", "é": "e"}
    log.get_logger("t").info("Renamed", **fields)

    entry = to_journald.receive()
    assert entry["MESSAGE"] == "Renamed"
    assert {k: entry[k] for k in ("POD_UID", "SECRET", "F_3D", "X_Y_Z", "F_MESSAGE", "F_")} == {
        "POD_UID": "u", "SECRET": "s", "F_3D": "d", "X_Y_Z": "x", "F_MESSAGE": "m", "F_": "e",
    }  # fmt: skip


def test_an_oversized_entry_travels_in_a_sealed_memfd(to_journald: FakeJournald) -> None:
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as probe:
        limit = probe.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF)
    big = "x" * (2 * limit)
    logger = log.get_logger("t")

    logger.info(big, pod_name="web-0")
    logger.info("small")

    first, second = to_journald.receive(), to_journald.receive()
    assert first.via_fd is True
    assert first["MESSAGE"] == big
    assert first["POD_NAME"] == "web-0"
    assert (second.via_fd, second["MESSAGE"]) == (False, "small")


def test_records_go_to_stderr_while_journald_is_gone_and_back_after(
    journald: FakeJournald, stderr: io.StringIO, tmp_path: Path
) -> None:
    log.setup(verbosity=0, environ={}, stream=stderr, target="journald",
              journal_socket=journald.path)  # fmt: skip
    logger = log.get_logger("t")
    journald.close()

    logger.info("while down", n=1)
    logger.info("still down", n=2)
    back = FakeJournald(Path(journald.path))
    try:
        logger.info("after restart", n=3)
        assert back.receive()["MESSAGE"] == "after restart"
    finally:
        back.close()

    lines = stderr.getvalue().splitlines()
    assert len(lines) == 3, lines
    assert lines[0].startswith("W")
    assert lines[0].endswith(
        '] "Cannot write to journald; logging to stderr until it is back" '
        f'socket={journald.path} error="No such file or directory"'
    )
    assert lines[1].endswith('] "while down" n=1')
    assert lines[2].endswith('] "still down" n=2')
