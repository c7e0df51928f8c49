"""Read a container's log as ``kubectl logs`` shows it: across rotated files, filtered, and
followed while the container runs.

The files of one log are ``<path>.<YYYYMMDD-HHMMSS>[.gz]`` (rotated by the log manager, the
older ones gzipped) and ``<path>`` itself, the one the runtime writes. At a rotation the
runtime ends the old file with the part of a line it had read so far, as a partial record, and
starts the new file with the rest: a read joins the two (one parser across the files, or
:func:`join_torn` for a tail read backwards);
the oldest file left may start with the rest of a line whose start was in a removed file, and
that rest is shown as a line of its own, as the kubelet (which reads only ``<path>``) shows it
when ``<path>`` starts so. :func:`read_log` yields the bytes the client receives. File reads
run in ``asyncio.to_thread`` (the blocking edge), except a follower's reads of what was just
written (page cache, at most 64 KiB at a time); parsing and filtering run on the loop, one
chunk at a time.

Follow keeps the current file open: at its end it waits on :class:`DirWatch` (inotify) for a
write or a rotation. Given a :class:`Sink` (the HTTP response's connection), what the runtime
appends while the follower waits is read and written to the client in the inotify callback
itself, with no task to wake between the runtime's write and the socket (the task then only
checks for a rotation); without one, or while the client's buffer is full, the task reads and
yields it; when ``<path>`` is a different file than the one open (renamed away by a
rotation and recreated by the runtime's ``ReopenContainerLog``), it finishes the old one and
continues at the start of the new one. It stops when the container is no longer running (asked
at most once a second while idle) and the file has nothing more.
"""

from __future__ import annotations

import asyncio
import glob
import gzip
import os
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Final, Protocol

from nodeagent.containerlogs.cri import Entry, LogParser, fixed_timestamp, timestamp_ns
from nodeagent.containerlogs.options import LogOptions
from nodeagent.containerlogs.watch import DirWatch

CHUNK: Final = 1 << 20
FOLLOW_CHUNK: Final = 64 << 10
RUNNING_CHECK: Final = 1.0


class Sink(Protocol):
    """Where a follower writes new lines at once (the client's connection), bypassing the
    generator."""

    def writable(self) -> bool:
        """Whether a chunk may be written now without waiting (connection open, its buffer
        below the high-water mark)."""
        ...

    def write(self, data: bytes) -> None: ...


def log_files(path: str) -> list[str]:
    """The rotated files of ``path``, oldest first (their names sort by time); when both the
    plain and the gzipped copy of one rotation exist (compression in progress), the plain."""
    by_stamp: dict[str, str] = {}
    for name in glob.glob(glob.escape(path) + ".*"):
        suffix = name[len(path) + 1 :]
        if suffix.endswith(".tmp"):
            continue
        stamp = suffix.removesuffix(".gz")
        if stamp not in by_stamp or not name.endswith(".gz"):
            by_stamp[stamp] = name
    return [by_stamp[s] for s in sorted(by_stamp)]


def _read_whole(path: str) -> bytes:
    if path.endswith(".gz"):
        with gzip.open(path, "rb") as f:
            return f.read()
    with open(path, "rb") as f:
        return f.read()


async def _file_data(path: str) -> bytes:
    try:
        return await asyncio.to_thread(_read_whole, path)
    except (FileNotFoundError, EOFError, gzip.BadGzipFile):
        return b""  # removed by the rotation or garbage collection meanwhile


async def _file_entries(path: str) -> list[Entry]:
    parser = LogParser()
    return parser.feed(await _file_data(path)) + parser.flush()


class _Output:
    """Filters and formats entries; counts bytes against ``limitBytes``."""

    def __init__(self, options: LogOptions) -> None:
        self._o = options
        self._left = options.limit_bytes
        self.done = False

    def keep(self, entry: Entry) -> bool:
        if not self._o.wants(entry.stream):
            return False
        if self._o.since_ns is not None:
            ns = timestamp_ns(entry.timestamp)
            if ns is not None and ns < self._o.since_ns:
                return False
        return True

    def render(self, entries: list[Entry]) -> bytes:
        if self.done:
            return b""
        if self._o.timestamps:
            data = b"".join(
                fixed_timestamp(e.timestamp) + b" " + e.content for e in entries if self.keep(e)
            )
        else:
            data = b"".join(e.content for e in entries if self.keep(e))
        if self._left is not None:
            if len(data) >= self._left:
                data = data[: self._left]
                self.done = True
            self._left -= len(data)
        return data


def join_torn(older: list[Entry], newer: list[Entry]) -> list[Entry]:
    """The entries of two consecutive files: when the older ends with an unfinished partial
    line (the runtime stopped writing it at a rotation), the newer's first entry of the same
    stream is its rest, joined to it with the older's timestamp and in its place."""
    if not older or older[-1].content.endswith(b"\n"):
        return older + newer
    start = older[-1]
    for i, entry in enumerate(newer):
        if entry.stream == start.stream:
            whole = Entry(start.timestamp, start.stream, start.content + entry.content)
            return [*older[:-1], whole, *newer[:i], *newer[i + 1 :]]
    return older + newer


async def _tail_entries(
    rotated: list[str], current: list[Entry], n: int, keep: Callable[[Entry], bool]
) -> list[Entry]:
    """The last ``n`` lines that ``keep`` selects, reading older files only as far back as
    needed: until there are more than ``n``, since a file's first line may be the rest of a
    line the older one started."""
    entries = current
    for path in reversed(rotated):
        if sum(1 for e in entries if keep(e)) > n:
            break
        entries = join_torn(await _file_entries(path), entries)
    selected = [e for e in entries if keep(e)]
    return selected[-n:] if n else []


async def _read_fd(fd: int) -> bytes:
    return await asyncio.to_thread(os.read, fd, CHUNK)


def _read_new(fd: int) -> bytes:
    """What a follower reads past the end it already reached: bytes the runtime has just
    written, so in the page cache; read on the loop (at most :data:`FOLLOW_CHUNK` at a time)
    rather than through the thread pool, where a line would queue behind the housekeeping's
    file reads."""
    return os.read(fd, FOLLOW_CHUNK)


async def read_log(
    path: str,
    options: LogOptions,
    *,
    running: Callable[[], Awaitable[bool]],
    client_alive: Callable[[], bool] = lambda: True,
    sink: Sink | None = None,
) -> AsyncIterator[bytes]:
    """The log of one container instance, as the client sees it. A follower also ends when
    ``client_alive()`` turns false (asked while the log is idle: a client that went away
    while nothing was written). With ``sink``, lines a follower sees appended while it waits
    go to ``sink.write`` instead of being yielded; the consumer must have written every chunk
    it was given before it asks for the next (as ``async for`` ... ``await write`` does), so
    that the two stay in order."""
    out = _Output(options)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return
    try:
        inode = os.fstat(fd).st_ino
        rotated = [p for p in log_files(path) if _inode(p) != inode]
        parser = LogParser()
        if options.tail_lines is not None:
            current: list[Entry] = []
            while data := await _read_fd(fd):
                current += parser.feed(data)
            if not options.follow:
                current += parser.flush()
            entries = await _tail_entries(rotated, current, options.tail_lines, out.keep)
            if chunk := out.render(entries):
                yield chunk
        else:
            # one parser for all the files: the runtime ends a file it stops writing at a
            # rotation with the line read so far as a partial (P) record, and the next file
            # starts with the rest of that line
            for name in rotated:
                if chunk := out.render(parser.feed(await _file_data(name))):
                    yield chunk
                if out.done:
                    return
            while data := await _read_fd(fd):
                if chunk := out.render(parser.feed(data)):
                    yield chunk
                if out.done:
                    return
            if not options.follow and (chunk := out.render(parser.flush())):
                yield chunk
        if not options.follow or out.done:
            return
        async for chunk in _follow(
            path, fd, parser, out, running=running, client_alive=client_alive, sink=sink
        ):
            yield chunk
    finally:
        os.close(fd)


def _inode(path: str) -> int:
    try:
        return os.stat(path).st_ino
    except FileNotFoundError:
        return -1


async def _follow(
    path: str,
    fd: int,
    parser: LogParser,
    out: _Output,
    *,
    running: Callable[[], Awaitable[bool]],
    client_alive: Callable[[], bool],
    sink: Sink | None,
) -> AsyncIterator[bytes]:
    loop = asyncio.get_running_loop()
    idle_since = loop.time() - RUNNING_CHECK  # the first end of file asks at once
    waiting = False  # parked in watch.wait: everything yielded so far is written

    def on_change() -> None:
        """In the inotify callback: what was appended, straight to the client."""
        nonlocal idle_since, sink
        if not waiting or sink is None or out.done or not sink.writable():
            return
        try:
            data = _read_new(fd)
        except OSError:
            sink = None  # the task's own read meets the error and ends the follow
            return
        if data:
            idle_since = loop.time()
            if chunk := out.render(parser.feed(data)):
                sink.write(chunk)

    async with DirWatch(os.path.dirname(path) or ".", on_change) as watch:
        exiting = False
        while not out.done:
            data = _read_new(fd)
            if data:
                idle_since = loop.time()
                if chunk := out.render(parser.feed(data)):
                    yield chunk
                await asyncio.sleep(0)  # a fast writer must not hold the loop
                continue
            if exiting:
                break
            current = _inode(path)
            if current not in (-1, os.fstat(fd).st_ino):
                # rotated: the old file is finished (we are at its end); go on with the new
                try:
                    new = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
                except FileNotFoundError:
                    continue
                os.dup2(new, fd)
                os.close(new)
                continue
            if loop.time() - idle_since >= RUNNING_CHECK:
                idle_since = loop.time()
                if not client_alive():
                    return
                if not await running():
                    exiting = True  # one more read for what it wrote before it exited
                    continue
            waiting = True
            try:
                await watch.wait(RUNNING_CHECK)
            finally:
                waiting = False
        if chunk := out.render(parser.flush()):
            yield chunk
