"""The CRI log reader: parsing, partial lines, options, rotated files, follow."""

from __future__ import annotations

import asyncio
import datetime as dt
import gzip
from collections.abc import Callable
from pathlib import Path

import pytest

from nodeagent.containerlogs.cri import Entry, LogParser, fixed_timestamp, timestamp_ns
from nodeagent.containerlogs.options import LogOptions, LogOptionsError, parse_options
from nodeagent.containerlogs.reader import join_torn, log_files, read_log

NOW = dt.datetime(2026, 11, 25, 4, 0, 0, tzinfo=dt.UTC)


def rec(second: int, stream: str, tag: str, content: str) -> str:
    return f"2026-11-25T04:00:{second:02d}.5Z {stream} {tag} {content}\n"


async def read(path: Path, options: LogOptions, running: bool = False) -> bytes:
    async def is_running() -> bool:
        return running

    return b"".join([c async for c in read_log(str(path), options, running=is_running)])


def test_parser_joins_partial_lines_per_stream_in_any_chunking() -> None:
    data = (
        rec(1, "stdout", "P", "hel")
        + rec(1, "stderr", "F", "oops")
        + rec(2, "stdout", "P", "lo ")
        + rec(3, "stdout", "F", "world")
        + rec(4, "stdout", "F", "")
    ).encode()
    for size in (1, 7, len(data)):
        parser = LogParser()
        entries: list[Entry] = []
        for i in range(0, len(data), size):
            entries += parser.feed(data[i : i + size])
        entries += parser.flush()
        assert [(e.stream, e.content) for e in entries] == [
            (b"stderr", b"oops\n"),
            (b"stdout", b"hello world\n"),
            (b"stdout", b"\n"),
        ]
        assert entries[1].timestamp == b"2026-11-25T04:00:01.5Z"  # the first chunk's


def test_parser_skips_malformed_records_and_flushes_unfinished_partials() -> None:
    parser = LogParser()
    entries = parser.feed(b"garbage\n" + rec(1, "stdout", "P", "half").encode())
    entries += parser.flush()
    assert [e.content for e in entries] == [b"half"]
    assert parser.malformed == 1


def test_timestamps_parse_and_print_with_nine_digits() -> None:
    assert (
        timestamp_ns(b"2026-11-25T04:00:01.5Z")
        == int(dt.datetime(2026, 11, 25, 4, 0, 1, tzinfo=dt.UTC).timestamp() * 1e9) + 500_000_000
    )
    assert (
        timestamp_ns(b"2026-11-25T05:00:01.000000001+01:00")
        == int(dt.datetime(2026, 11, 25, 4, 0, 1, tzinfo=dt.UTC).timestamp() * 1e9) + 1
    )
    assert timestamp_ns(b"nonsense") is None
    assert fixed_timestamp(b"2026-11-25T04:00:01.5Z") == b"2026-11-25T04:00:01.500000000Z"
    assert fixed_timestamp(b"2026-11-25T04:00:01Z") == b"2026-11-25T04:00:01.000000000Z"
    assert (
        fixed_timestamp(b"2026-11-25T04:00:01.123+01:00") == b"2026-11-25T04:00:01.123000000+01:00"
    )


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ({"tailLines": "-1"}, "tailLines: Invalid value: -1: must be greater than or equal to 0"),
        ({"limitBytes": "0"}, "limitBytes: Invalid value: 0: must be greater than 0"),
        ({"sinceSeconds": "x"}, "sinceSeconds: Invalid value: 'x': must be an integer"),
        (
            {"sinceSeconds": "1", "sinceTime": "2026-11-25T04:00:00Z"},
            "at most one of `sinceTime` or `sinceSeconds` may be specified",
        ),
        ({"sinceTime": "yesterday"}, "sinceTime: Invalid value: 'yesterday'"),
        ({"stream": "Both"}, 'stream: Unsupported value: "Both"'),
        ({"stream": "Stdout", "tailLines": "1"}, "tailLines: Forbidden"),
        ({"follow": "maybe"}, "follow: Invalid value: 'maybe'"),
    ],
)
def test_bad_options_name_the_field_and_value(query: dict[str, str], message: str) -> None:
    with pytest.raises(LogOptionsError) as err:
        parse_options(query, now=NOW)
    assert message in str(err.value)


def test_options_decode() -> None:
    o = parse_options(
        {"follow": "true", "timestamps": "1", "tailLines": "3", "sinceSeconds": "10"}, now=NOW
    )
    assert (o.follow, o.timestamps, o.tail_lines) == (True, True, 3)
    assert o.since_ns == int((NOW.timestamp() - 10) * 1e9)
    o = parse_options({"sinceTime": "2026-11-25T04:00:02Z", "stream": "Stderr"}, now=NOW)
    assert o.since_ns == int(dt.datetime(2026, 11, 25, 4, 0, 2, tzinfo=dt.UTC).timestamp()) * 10**9
    assert o.stream == "Stderr"


@pytest.fixture
def rotated_log(tmp_path: Path) -> Path:
    """Lines 1-9: 1-3 gzipped, 4-6 rotated plain, 7-9 current; odd lines on stderr."""
    log = tmp_path / "0.log"

    def lines(numbers: range) -> str:
        return "".join(rec(n, "stderr" if n % 2 else "stdout", "F", f"line {n}") for n in numbers)

    with gzip.open(tmp_path / "0.log.20261125-040003.gz", "wt") as f:
        f.write(lines(range(1, 4)))
    (tmp_path / "0.log.20261125-040006").write_text(lines(range(4, 7)))
    (tmp_path / "0.log.20261125-040006.gz.tmp").write_text("half written\n")
    log.write_text(lines(range(7, 10)))
    return log


def test_rotated_files_are_listed_oldest_first_without_temporaries(rotated_log: Path) -> None:
    assert [Path(p).name for p in log_files(str(rotated_log))] == [
        "0.log.20261125-040003.gz",
        "0.log.20261125-040006",
    ]


def text(*numbers: int) -> bytes:
    return b"".join(f"line {n}\n".encode() for n in numbers)


async def test_reads_across_rotated_and_gzipped_files(rotated_log: Path) -> None:
    assert await read(rotated_log, LogOptions()) == text(*range(1, 10))


async def test_a_line_torn_by_a_rotation_reads_back_whole_with_its_first_timestamp(
    tmp_path: Path,
) -> None:
    # the runtime ends the file it stops writing with the line read so far (P) and starts
    # the new file with the rest (F); the oldest file left starts with the rest of a line
    # whose start was in a file already removed
    (tmp_path / "0.log.20261125-040003").write_text(
        rec(1, "stdout", "F", "ing of line 1") + rec(2, "stdout", "P", "line ")
    )
    log = tmp_path / "0.log"
    log.write_text(rec(3, "stdout", "F", "2") + rec(4, "stdout", "F", "line 3"))
    assert await read(log, LogOptions()) == b"ing of line 1\nline 2\nline 3\n"
    stamped = await read(log, LogOptions(timestamps=True))
    assert stamped.splitlines()[1] == b"2026-11-25T04:00:02.500000000Z line 2"
    tail = await read(log, LogOptions(timestamps=True, tail_lines=2))
    assert tail.splitlines() == [
        b"2026-11-25T04:00:02.500000000Z line 2",
        b"2026-11-25T04:00:04.500000000Z line 3",
    ]


def test_a_torn_line_is_joined_with_the_rest_of_its_own_stream() -> None:
    older = [Entry(b"t1", b"stdout", b"whole\n"), Entry(b"t2", b"stdout", b"sta")]
    newer = [Entry(b"t3", b"stderr", b"oops\n"), Entry(b"t4", b"stdout", b"rt\n")]
    assert join_torn(older, newer) == [
        Entry(b"t1", b"stdout", b"whole\n"),
        Entry(b"t2", b"stdout", b"start\n"),
        Entry(b"t3", b"stderr", b"oops\n"),
    ]
    assert join_torn(older[:1], newer) == older[:1] + newer


async def test_tail_reads_back_only_as_far_as_needed(rotated_log: Path) -> None:
    assert await read(rotated_log, LogOptions(tail_lines=2)) == text(8, 9)
    assert await read(rotated_log, LogOptions(tail_lines=5)) == text(5, 6, 7, 8, 9)
    assert await read(rotated_log, LogOptions(tail_lines=0)) == b""
    assert await read(rotated_log, LogOptions(tail_lines=100)) == text(*range(1, 10))


async def test_since_stream_limit_and_timestamps(rotated_log: Path) -> None:
    since = timestamp_ns(b"2026-11-25T04:00:06Z")
    assert await read(rotated_log, LogOptions(since_ns=since)) == text(6, 7, 8, 9)
    assert await read(rotated_log, LogOptions(stream="Stdout")) == text(2, 4, 6, 8)
    assert await read(rotated_log, LogOptions(stream="Stderr")) == text(1, 3, 5, 7, 9)
    assert await read(rotated_log, LogOptions(limit_bytes=10)) == b"line 1\nlin"
    assert await read(rotated_log, LogOptions(timestamps=True, tail_lines=1)) == (
        b"2026-11-25T04:00:09.500000000Z line 9\n"
    )


async def test_missing_log_reads_empty(tmp_path: Path) -> None:
    assert await read(tmp_path / "0.log", LogOptions()) == b""


async def test_follow_sees_new_lines_and_a_rotation_and_ends_when_the_container_exits(
    tmp_path: Path,
) -> None:
    log = tmp_path / "0.log"
    log.write_text(rec(1, "stdout", "F", "first"))
    running = True

    async def is_running() -> bool:
        return running

    got: list[bytes] = []
    stream = read_log(str(log), LogOptions(follow=True), running=is_running)

    async def consume() -> None:
        async for chunk in stream:
            got.append(chunk)

    task = asyncio.create_task(consume())

    async def until_got(expected: bytes) -> None:
        for _ in range(300):
            if b"".join(got) == expected:
                return
            await asyncio.sleep(0.01)
        raise AssertionError(f"got {b''.join(got)!r}, want {expected!r}")

    await until_got(b"first\n")
    with log.open("a") as f:
        f.write(rec(2, "stdout", "P", "sec"))
        f.flush()
        f.write(rec(2, "stdout", "F", "ond"))
    await until_got(b"first\nsecond\n")
    # a rotation: the file is renamed away, the runtime reopens a new one
    with log.open("a") as f:
        f.write(rec(3, "stdout", "F", "last before rotation"))
    log.rename(tmp_path / "0.log.20261125-040003")
    log.write_text(rec(4, "stdout", "F", "after rotation"))
    await until_got(b"first\nsecond\nlast before rotation\nafter rotation\n")
    running = False
    with log.open("a") as f:
        f.write(rec(5, "stdout", "F", "bye"))
    async with asyncio.timeout(5):
        await task
    assert b"".join(got).endswith(b"after rotation\nbye\n")


async def test_follow_of_an_exited_container_ends_at_once(tmp_path: Path) -> None:
    log = tmp_path / "0.log"
    log.write_text(rec(1, "stdout", "F", "done"))
    started = asyncio.get_running_loop().time()
    assert await read(log, LogOptions(follow=True)) == b"done\n"
    assert asyncio.get_running_loop().time() - started < 0.5


async def test_follow_ends_when_the_client_is_gone(tmp_path: Path) -> None:
    log = tmp_path / "0.log"
    log.write_text(rec(1, "stdout", "F", "hi"))

    async def running() -> bool:
        return True

    alive = [True]
    got = []
    stream = read_log(
        str(log), LogOptions(follow=True), running=running, client_alive=lambda: alive[0]
    )
    async with asyncio.timeout(5):
        async for chunk in stream:
            got.append(chunk)
            alive[0] = False
    assert got == [b"hi\n"]


class RecordingSink:
    """A client connection: what was written to it, and whether it takes more now."""

    def __init__(self, got: list[bytes]) -> None:
        self.got = got
        self.open = True
        self.writes = 0

    def writable(self) -> bool:
        return self.open

    def write(self, data: bytes) -> None:
        self.writes += 1
        self.got.append(data)


async def until(condition: Callable[[], bool], what: Callable[[], object]) -> None:
    for _ in range(300):
        if condition():
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"gave up waiting; have {what()!r}")


async def test_a_follower_with_a_sink_writes_appended_lines_to_it_in_order(
    tmp_path: Path,
) -> None:
    """Lines appended while the follower waits go to the sink (from the inotify callback);
    while the sink takes nothing they are yielded; either way the client sees one stream in
    order, partial lines joined."""
    log = tmp_path / "0.log"
    log.write_text(rec(1, "stdout", "F", "history"))
    running = True

    async def is_running() -> bool:
        return running

    got: list[bytes] = []
    sink = RecordingSink(got)
    stream = read_log(str(log), LogOptions(follow=True), running=is_running, sink=sink)

    async def consume() -> None:
        async for chunk in stream:
            got.append(chunk)

    task = asyncio.create_task(consume())

    def joined() -> bytes:
        return b"".join(got)

    await until(lambda: joined() == b"history\n", joined)
    with log.open("a") as f:
        f.write(rec(2, "stdout", "P", "one "))
        f.flush()
        f.write(rec(2, "stdout", "F", "line"))
    await until(lambda: joined() == b"history\none line\n", joined)
    assert sink.writes >= 1  # the appended line went through the sink
    sink.open = False  # a full client buffer: the task reads and yields instead
    writes = sink.writes
    with log.open("a") as f:
        f.write(rec(3, "stderr", "F", "while full"))
    await until(lambda: joined().endswith(b"while full\n"), joined)
    assert sink.writes == writes
    sink.open = True
    running = False
    with log.open("a") as f:
        f.write(rec(4, "stdout", "F", "bye"))
    async with asyncio.timeout(5):
        await task
    assert joined() == b"history\none line\nwhile full\nbye\n"


async def test_a_sink_keeps_limit_bytes_and_ends_the_follow(tmp_path: Path) -> None:
    log = tmp_path / "0.log"
    log.write_text(rec(1, "stdout", "F", "abc"))

    async def running() -> bool:
        return True

    got: list[bytes] = []
    stream = read_log(
        str(log),
        LogOptions(follow=True, limit_bytes=6),
        running=running,
        sink=RecordingSink(got),
    )

    async def consume() -> None:
        async for chunk in stream:
            got.append(chunk)

    task = asyncio.create_task(consume())
    await until(lambda: b"".join(got) == b"abc\n", got.copy)
    with log.open("a") as f:
        f.write(rec(2, "stdout", "F", "defgh"))
    async with asyncio.timeout(5):
        await task  # the limit reached: the follow ends though the container runs
    assert b"".join(got) == b"abc\nde"
