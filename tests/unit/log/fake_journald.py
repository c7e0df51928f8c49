"""A fake journald: a datagram socket at a tmp path that parses the native protocol.

It accepts what the real journald accepts: ``NAME=value`` lines, the binary-safe form
(``NAME\\n`` + little-endian uint64 length + bytes + ``\\n``), and an empty datagram carrying a
sealed memfd via SCM_RIGHTS. It rejects field names journald would drop.
"""

from __future__ import annotations

import array
import fcntl
import os
import re
import socket
import struct
from dataclasses import dataclass, field
from pathlib import Path

VALID_NAME = re.compile(rb"[A-Z0-9_]{1,64}")
REQUIRED_SEALS = fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_WRITE


@dataclass
class Entry:
    raw: bytes
    fields: dict[str, list[bytes]] = field(default_factory=dict)
    binary: set[str] = field(default_factory=set)  # fields sent in the length-prefixed form
    via_fd: bool = False

    def __getitem__(self, name: str) -> str:
        (value,) = self.fields[name]
        return value.decode()

    def get(self, name: str) -> str | None:
        return self[name] if name in self.fields else None


def parse(raw: bytes) -> Entry:
    entry = Entry(raw=raw)
    pos = 0
    while pos < len(raw):
        end = raw.index(b"\n", pos)
        line = raw[pos:end]
        if b"=" in line:
            name, _, value = line.partition(b"=")
            pos = end + 1
        else:
            name = line
            (size,) = struct.unpack_from("<Q", raw, end + 1)
            start = end + 9
            value = raw[start : start + size]
            if raw[start + size : start + size + 1] != b"\n":
                raise ValueError(f"binary field {name!r} not terminated by a newline")
            pos = start + size + 1
            entry.binary.add(name.decode())
        if not VALID_NAME.fullmatch(name) or name[:1] == b"_" or name[:1].isdigit():
            raise ValueError(f"journald would reject the field name {name!r}")
        entry.fields.setdefault(name.decode(), []).append(value)
    return entry


class FakeJournald:
    def __init__(self, path: Path) -> None:
        self.path = str(path)
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(self.path)

    def receive(self, timeout: float = 2.0) -> Entry:
        """The next entry; the timeout only guards against a hang."""
        self.sock.settimeout(timeout)
        data, ancdata, _, _ = self.sock.recvmsg(1 << 20, socket.CMSG_SPACE(4))
        fds = array.array("i")
        for level, kind, payload in ancdata:
            if (level, kind) == (socket.SOL_SOCKET, socket.SCM_RIGHTS):
                fds.frombytes(payload[: len(payload) - len(payload) % fds.itemsize])
        if not fds:
            return parse(data)
        (fd,) = fds
        try:
            assert data == b"", "an fd-passing datagram carries no payload"
            seals = fcntl.fcntl(fd, fcntl.F_GET_SEALS)
            assert seals & REQUIRED_SEALS == REQUIRED_SEALS, f"memfd not sealed: {seals:#x}"
            entry = parse(os.pread(fd, os.fstat(fd).st_size, 0))
        finally:
            os.close(fd)
        entry.via_fd = True
        return entry

    def pending(self) -> int:
        """How many datagrams are queued (without consuming them)."""
        count = 0
        self.sock.setblocking(False)
        try:
            while True:
                self.sock.recv(1 << 20)
                count += 1
        except BlockingIOError:
            return count

    def close(self) -> None:
        self.sock.close()
        Path(self.path).unlink(missing_ok=True)
