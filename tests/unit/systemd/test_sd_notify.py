"""sd_notify messages as systemd receives them on NOTIFY_SOCKET."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

import pytest
from sd_listener import NotifyListener

from nodeagent.log.facade import record_fields
from nodeagent.systemd.notify import Notifier


def test_ready_carries_status(notify_listener: NotifyListener) -> None:
    notifier = Notifier.from_environ({"NOTIFY_SOCKET": notify_listener.env_value})

    assert notifier.ready(status="running 3 managers") is True

    assert notify_listener.receive() == "READY=1\nSTATUS=running 3 managers"


def test_status_stopping_and_watchdog_are_separate_datagrams(
    notify_listener: NotifyListener,
) -> None:
    notifier = Notifier.from_environ({"NOTIFY_SOCKET": notify_listener.env_value})

    notifier.status("syncing pods")
    notifier.watchdog()
    notifier.stopping(status="stopping: signal SIGTERM")
    notifier.stopping()

    assert notify_listener.drain() == [
        "STATUS=syncing pods",
        "WATCHDOG=1",
        "STOPPING=1\nSTATUS=stopping: signal SIGTERM",
        "STOPPING=1",
    ]


def test_abstract_namespace_socket_is_reached(abstract_notify_listener: NotifyListener) -> None:
    notifier = Notifier.from_environ({"NOTIFY_SOCKET": abstract_notify_listener.env_value})

    assert notifier.ready() is True

    assert abstract_notify_listener.receive() == "READY=1"


def test_multi_line_status_cannot_inject_assignments(notify_listener: NotifyListener) -> None:
    notifier = Notifier(socket_path=notify_listener.env_value)

    notifier.status("degraded\nREADY=1")

    assert notify_listener.receive() == "STATUS=degraded READY=1"


@pytest.mark.parametrize("environ", [{}, {"NOTIFY_SOCKET": ""}], ids=["unset", "empty"])
def test_without_notify_socket_every_call_is_a_no_op(environ: dict[str, str]) -> None:
    notifier = Notifier.from_environ(environ)

    assert notifier.enabled is False
    assert [
        notifier.ready("x"),
        notifier.status("x"),
        notifier.watchdog(),
        notifier.stopping(),
    ] == [False] * 4


@pytest.mark.parametrize(
    ("make_value", "error"),
    [
        pytest.param(
            lambda p: str(p / "gone.sock"), "No such file or directory", id="missing path"
        ),
        pytest.param(str, "Connection refused", id="path is not a socket"),
        pytest.param(
            lambda p: "relative.sock",
            "NOTIFY_SOCKET must be an absolute path or start with @",
            id="relative path",
        ),
    ],
)
def test_unreachable_socket_warns_once_and_returns_false(
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    make_value: Callable[[Path], str],
    error: str,
) -> None:
    value = make_value(tmp_path)
    notifier = Notifier(socket_path=value)

    results = [notifier.ready(), notifier.watchdog(), notifier.stopping()]

    assert results == [False, False, False]
    warnings = [r for r in caplog.records if r.name == "nodeagent.systemd"]
    assert len(warnings) == 1
    assert warnings[0].levelno == logging.WARNING
    assert record_fields(warnings[0]) == {"notify_socket": value, "error": error}
