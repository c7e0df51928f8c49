"""``/logs/``: the node's log files (the kubelet's ``enableSystemLogHandler``), and
``/logs/?query=<unit>`` through the journal (its ``enableSystemLogQuery``, node log query).

Files: everything under the log directory (``/var/log``), a directory as the Go file server
lists it (``<pre>`` of links), a file as is. A writer under the log directory (a hostPath pod,
as log collectors have) can swap any entry for a symlink at any moment, so a path is opened
once, beneath the directory's descriptor with no symlink followed
(:func:`nodeagent.beneath.open_beneath`), and the answer is made from that descriptor: a
listing from ``scandir`` of it, a file through its ``/proc/self/fd`` link, which names the
open file and is not resolved again. ``..`` and every symlink (even one that stays inside)
are a 404, stricter than the kubelet's file server, which follows symlinks anywhere.

Query: ``journalctl -u <unit>`` for each ``query`` value, with ``sinceTime``, ``untilTime``,
``tailLines``, ``pattern`` and ``boot`` as the kubelet passes them, streamed as journalctl
writes it; refused with a message naming the setting while ``enableSystemLogQuery`` is false
(the kubelet's default).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import html
import os
import re
import shutil
import stat
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from aiohttp import web

from nodeagent.beneath import NotBeneath, open_beneath

UNIT: Final = re.compile(r"^[A-Za-z0-9._@:\\-]+$")


@dataclass(frozen=True, slots=True)
class NodeLogSettings:
    enabled: bool = True
    query_enabled: bool = False
    directory: str = "/var/log"
    journalctl: str = "journalctl"


NODE_LOGS = web.AppKey("nodelogs", NodeLogSettings)

routes = web.RouteTableDef()


def listing(names: list[tuple[str, bool]]) -> str:
    """A directory as Go's ``http.FileServer`` lists it."""
    rows = "".join(
        f'<a href="{urllib.parse.quote(n + ("/" if d else ""))}">'
        f"{html.escape(n + ('/' if d else ''))}</a>\n"
        for n, d in sorted(names)
    )
    return (
        '<!doctype html>\n<meta name="viewport" content="width=device-width">\n<pre>\n'
        + rows
        + "</pre>\n"
    )


@dataclass(frozen=True, slots=True)
class Entry:
    """An open file or directory under the log directory (the caller closes ``fd``)."""

    fd: int
    is_dir: bool


def open_entry(directory: str, relative: str) -> Entry | None:
    """``relative`` opened beneath ``directory`` without following a symlink; None when it
    is missing, leaves the directory, goes through a symlink or is neither a regular file
    nor a directory (a FIFO is opened non-blocking, then refused). ``PermissionError``
    passes through. Blocking."""
    root = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        fd = open_beneath(root, relative, os.O_RDONLY | os.O_NONBLOCK)
    except (NotBeneath, FileNotFoundError, NotADirectoryError):
        return None
    finally:
        os.close(root)
    mode = os.fstat(fd).st_mode
    if stat.S_ISDIR(mode) or stat.S_ISREG(mode):
        return Entry(fd, stat.S_ISDIR(mode))
    os.close(fd)
    return None


def scan(fd: int) -> list[tuple[str, bool]]:
    """(name, is a directory) of the open directory ``fd``; a symlink is not a directory."""
    with os.scandir(fd) as it:
        return [(e.name, e.is_dir(follow_symlinks=False)) for e in it]


class _DescriptorResponse(web.FileResponse):
    """A file answered from an open descriptor (its ``/proc/self/fd/<n>`` link names the open
    file, not a path), with ``FileResponse``'s ranges and conditional requests. Prepared by
    the handler while the descriptor is open; aiohttp's own later ``prepare`` is a no-op."""

    async def prepare(self, request: web.BaseRequest) -> Any:
        if self.prepared:
            return None
        return await super().prepare(request)


def journal_argv(query: Mapping[str, str], units: list[str], journalctl: str) -> list[str]:
    """The journalctl command for a node log query; ``ValueError`` names a bad parameter."""
    argv = [journalctl, "--utc", "--no-pager", "--output=short-precise"]
    for unit in units:
        if not UNIT.match(unit):
            raise ValueError(f"query: Invalid value: {unit!r}: not a service name")
        argv += ["--unit", unit]
    for name, flag in (("sinceTime", "--since"), ("untilTime", "--until")):
        if (value := query.get(name)) is not None:
            try:
                moment = dt.datetime.fromisoformat(value)
            except ValueError:
                raise ValueError(
                    f"{name}: Invalid value: {value!r}: must be an RFC 3339 time"
                ) from None
            argv.append(f"{flag}={moment.astimezone(dt.UTC):%Y-%m-%d %H:%M:%S}")
    if (tail := query.get("tailLines")) is not None:
        if not tail.isdigit():
            raise ValueError(f"tailLines: Invalid value: {tail!r}: must be a non-negative integer")
        argv.append(f"--lines={int(tail)}")
    if (boot := query.get("boot")) is not None:
        if not re.fullmatch(r"-?\d+", boot) or int(boot) > 0:
            raise ValueError(f"boot: Invalid value: {boot!r}: must be 0 or negative")
        argv.append(f"--boot={boot}")
    if (pattern := query.get("pattern")) is not None:
        argv.append(f"--grep={pattern}")
    return argv


async def _query(request: web.Request, settings: NodeLogSettings) -> web.StreamResponse:
    if not settings.query_enabled:
        return web.Response(
            status=403,
            text="node log query is disabled: set kubelet.enableSystemLogQuery to true\n",
        )
    units = request.query.getall("query")
    try:
        argv = journal_argv(request.query, units, settings.journalctl)
    except ValueError as e:
        return web.Response(status=400, text=f"{e}\n")
    if shutil.which(argv[0]) is None:
        return web.Response(status=500, text=f"{argv[0]} is not installed on this node\n")
    proc = await asyncio.create_subprocess_exec(
        *argv, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL
    )
    assert proc.stdout is not None
    response = web.StreamResponse()
    response.content_type = "text/plain"
    await response.prepare(request)
    try:
        while chunk := await proc.stdout.read(65536):
            await response.write(chunk)
    finally:
        if proc.returncode is None:
            proc.kill()
        await proc.wait()
    await response.write_eof()
    return response


@routes.get("/logs")
@routes.get("/logs/{path:.*}")
async def node_logs(request: web.Request) -> web.StreamResponse:
    settings = request.app[NODE_LOGS]
    if not settings.enabled:
        return web.Response(
            status=404, text="404 page not found (kubelet.enableSystemLogHandler is false)\n"
        )
    if "query" in request.query:
        return await _query(request, settings)
    relative = request.match_info.get("path", "")
    if request.path == "/logs":
        raise web.HTTPMovedPermanently("/logs/")
    try:
        entry = await asyncio.to_thread(open_entry, settings.directory, relative)
    except PermissionError:
        return web.Response(status=403, text="403 Forbidden\n")
    if entry is None:
        return web.Response(status=404, text="404 page not found\n")
    try:
        if entry.is_dir:
            if relative and not relative.endswith("/"):
                raise web.HTTPMovedPermanently(request.path + "/")
            try:
                names = await asyncio.to_thread(scan, entry.fd)
            except PermissionError:
                return web.Response(status=403, text="403 Forbidden\n")
            return web.Response(text=listing(names), content_type="text/html")
        response = _DescriptorResponse(
            f"/proc/self/fd/{entry.fd}", headers={"Content-Type": "text/plain; charset=utf-8"}
        )
        await response.prepare(request)
        return response
    finally:
        os.close(entry.fd)
