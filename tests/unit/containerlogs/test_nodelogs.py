"""``/logs/``: listing and files under the log directory, no escape; the journal query."""

from __future__ import annotations

import collections
import os
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from racing import exchanging

from nodeagent.containerlogs.nodelogs import (
    NODE_LOGS,
    NodeLogSettings,
    journal_argv,
    open_entry,
    routes,
)

Client = TestClient[Any, Any]


@pytest.fixture
def logdir(tmp_path: Path) -> Path:
    d = tmp_path / "log"
    (d / "apt").mkdir(parents=True)
    (d / "syslog").write_text("hello syslog\n")
    (d / "apt" / "history.log").write_text("apt things\n")
    (tmp_path / "secret").write_text("not for you\n")
    (d / "escape").symlink_to(tmp_path / "secret")
    (d / "inside").symlink_to(d / "syslog")
    (d / "up").symlink_to("apt")
    return d


async def client_for(settings: NodeLogSettings) -> Client:
    app = web.Application()
    app.add_routes(routes)
    app[NODE_LOGS] = settings
    return TestClient(TestServer(app))


@pytest.fixture
async def client(logdir: Path) -> AsyncIterator[Client]:
    async with await client_for(NodeLogSettings(directory=str(logdir))) as c:
        yield c


async def test_listing_and_files(client: Client) -> None:
    r = await client.get("/logs/")
    body = await r.text()
    assert r.status == 200
    assert '<a href="apt/">apt/</a>\n' in body
    assert '<a href="syslog">syslog</a>\n' in body
    r = await client.get("/logs/syslog")
    assert (r.status, await r.text()) == (200, "hello syslog\n")
    r = await client.get("/logs/apt/history.log")
    assert await r.text() == "apt things\n"
    r = await client.get("/logs/syslog", headers={"Range": "bytes=6-"})
    assert (r.status, await r.text()) == (206, "syslog\n")
    r = await client.get("/logs/apt", allow_redirects=False)
    assert (r.status, r.headers["Location"]) == (301, "/logs/apt/")


@pytest.mark.parametrize(
    "path",
    ["/logs/escape", "/logs/../secret", "/logs/apt/../../secret", "/logs/inside", "/logs/up/x"],
)
async def test_no_way_out_of_the_directory(client: Client, path: str) -> None:
    r = await client.get(path)
    assert r.status == 404
    assert "not for you" not in await r.text()


async def test_disabled_handler_and_query(logdir: Path) -> None:
    async with await client_for(NodeLogSettings(enabled=False, directory=str(logdir))) as c:
        r = await c.get("/logs/syslog")
        assert r.status == 404
        assert "enableSystemLogHandler" in await r.text()
    async with await client_for(NodeLogSettings(directory=str(logdir))) as c:
        r = await c.get("/logs/?query=kubelet")
        assert r.status == 403
        assert "enableSystemLogQuery" in await r.text()


async def test_query_runs_journalctl(logdir: Path, tmp_path: Path) -> None:
    fake = tmp_path / "journalctl"
    fake.write_text('#!/bin/sh\necho "journal $*"\n')
    fake.chmod(0o755)
    settings = NodeLogSettings(directory=str(logdir), query_enabled=True, journalctl=str(fake))
    async with await client_for(settings) as c:
        r = await c.get("/logs/?query=containerd&tailLines=5")
        assert await r.text() == (
            "journal --utc --no-pager --output=short-precise --unit containerd --lines=5\n"
        )
        r = await c.get("/logs/?query=a;rm")
        assert r.status == 400


def test_journal_arguments() -> None:
    argv = journal_argv(
        {"sinceTime": "2026-11-25T05:00:00+01:00", "boot": "-1", "pattern": "err"},
        ["kubelet", "containerd.service"],
        "journalctl",
    )
    assert argv[4:] == [
        "--unit", "kubelet", "--unit", "containerd.service",
        "--since=2026-11-25 04:00:00", "--boot=-1", "--grep=err",
    ]  # fmt: skip
    with pytest.raises(ValueError, match="boot: Invalid value: '1'"):
        journal_argv({"boot": "1"}, [], "journalctl")
    with pytest.raises(ValueError, match="tailLines"):
        journal_argv({"tailLines": "-3"}, [], "journalctl")


def test_open_entry_refuses_dot_dot_and_every_symlink(logdir: Path) -> None:
    """``..`` and any symlink, even one that stays inside (``inside``, ``up``), are refused."""
    entry = open_entry(str(logdir), "apt/history.log")
    assert entry is not None and not entry.is_dir
    assert os.read(entry.fd, 100) == b"apt things\n"
    os.close(entry.fd)
    entry = open_entry(str(logdir), "")
    assert entry is not None and entry.is_dir
    os.close(entry.fd)
    for path in ("apt/../../secret", "escape", "inside", "up/x", "missing", "syslog/x"):
        assert open_entry(str(logdir), path) is None, path
    os.mkfifo(logdir / "fifo")
    assert open_entry(str(logdir), "fifo") is None  # not opened for ever, not served


async def test_a_file_swapped_for_a_symlink_never_serves_the_target(
    logdir: Path, tmp_path: Path
) -> None:
    """A writer under the log directory (here another process) exchanges a log file with a
    symlink to a secret outside it in a loop while a client asks for the file (at least 400
    requests and 2000 exchanges): it gets the file or a 404, never the secret. (The
    check-then-open handler this replaced served it 5 to 12 times in about 400 requests.)"""
    entry, link = logdir / "racy.log", logdir / "racy.link"
    entry.write_text("an ordinary log line\n")
    link.symlink_to(tmp_path / "secret")
    answers: collections.Counter[str] = collections.Counter()
    deadline = time.monotonic() + 120  # a watchdog against a hang, not a measurement
    async with await client_for(NodeLogSettings(directory=str(logdir))) as c:
        with exchanging([(entry, link)]) as rounds:
            while (rounds() < 2000 or answers.total() < 400) and time.monotonic() < deadline:
                r = await c.get("/logs/racy.log")
                body = await r.text()
                answers["secret" if "not for you" in body else str(r.status)] += 1
            done = rounds()
    assert answers["secret"] == 0, answers
    assert answers["200"] > 0 and answers["404"] > 0, answers  # the race was on
    assert done >= 2000, done
