"""``/logs/``: the node's log files (the kubelet's ``enableSystemLogHandler``), and
``/logs/?query=<unit>`` through the journal (its ``enableSystemLogQuery``, node log query).

Files: everything under the log directory (``/var/log``), a directory as the Go file server
lists it (``<pre>`` of links), a file as is. A path that leaves the directory (``..``, or a
symlink resolving outside it) is a 404, stricter than the kubelet's file server which follows
symlinks anywhere. Query: ``journalctl -u <unit>`` for each ``query`` value, with
``sinceTime``, ``untilTime``, ``tailLines``, ``pattern`` and ``boot`` as the kubelet passes
them, streamed as journalctl writes it; refused with a message naming the setting while
``enableSystemLogQuery`` is false (the kubelet's default).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import html
import os
import re
import shutil
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from aiohttp import web

UNIT: Final = re.compile(r"^[A-Za-z0-9._@:\\-]+$")


@dataclass(frozen=True, slots=True)
class NodeLogSettings:
    enabled: bool = True
    query_enabled: bool = False
    directory: str = "/var/log"
    journalctl: str = "journalctl"


NODE_LOGS = web.AppKey("nodelogs", NodeLogSettings)

routes = web.RouteTableDef()


def resolve(directory: str, relative: str) -> str | None:
    """The real path of ``relative`` under ``directory``; None when it would leave it."""
    root = os.path.realpath(directory)
    parts = [p for p in relative.split("/") if p not in ("", ".")]
    if ".." in parts:
        return None
    target = os.path.realpath(os.path.join(root, *parts))
    if target != root and not target.startswith(root + os.sep):
        return None
    return target


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


def _locate(directory: str, relative: str) -> tuple[str | None, str]:
    target = resolve(directory, relative)
    if target is None or not os.path.exists(target):
        return target, "missing"
    return target, "dir" if os.path.isdir(target) else "file"


def _scan(path: str) -> list[tuple[str, bool]]:
    with os.scandir(path) as it:
        return [(e.name, e.is_dir()) for e in it]


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
    target, kind = await asyncio.to_thread(_locate, settings.directory, relative)
    if target is None or kind == "missing":
        return web.Response(status=404, text="404 page not found\n")
    if kind == "dir":
        if relative and not relative.endswith("/"):
            raise web.HTTPMovedPermanently(request.path + "/")
        try:
            names = await asyncio.to_thread(_scan, target)
        except PermissionError:
            return web.Response(status=403, text="403 Forbidden\n")
        return web.Response(text=listing(names), content_type="text/html")
    return web.FileResponse(target, headers={"Content-Type": "text/plain; charset=utf-8"})
