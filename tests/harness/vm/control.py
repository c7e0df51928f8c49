"""The host half of the VM control channel: JSON lines over qemu's virtio-serial unix socket.

The guest half is :mod:`harness.vm.guest_agent` (the protocol is described there). Every request
carries an ``id``; a reply with another ``id`` is a late answer to a request that already timed
out on the host and is dropped. Timeouts raise :class:`VmTimeout`; the caller (the machine)
adds the console tail to the message.
"""

from __future__ import annotations

import base64
import itertools
import json
import socket
import time
from pathlib import Path
from typing import Any


class VmError(Exception):
    """The VM or its control channel failed (not a command that exited non-zero)."""


class VmTimeout(VmError):
    """No answer in time: the guest is hung, too slow, or the command never finished."""


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def unb64(text: str) -> bytes:
    return base64.b64decode(text)


class ControlChannel:
    def __init__(self, *, socket_path: Path) -> None:
        self._path = socket_path
        self._sock: socket.socket | None = None
        self._buf = bytearray()
        self._ids = itertools.count(1)

    def connect(self, *, timeout: float) -> None:
        """Connect to qemu's listening socket (it appears a moment after qemu starts)."""
        deadline = time.monotonic() + timeout
        while True:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                sock.connect(str(self._path))
            except OSError as e:
                sock.close()
                if time.monotonic() > deadline:
                    raise VmTimeout(f"cannot connect to {self._path}: {e}") from e
                time.sleep(0.1)
                continue
            self._sock = sock
            return

    def attach(self, sock: socket.socket) -> None:
        """Use an already connected socket (tests talk to a guest agent over a socketpair)."""
        self._sock = sock

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None

    def request(self, op: str, *, timeout: float, **fields: Any) -> dict[str, Any]:
        """Send one request and wait up to ``timeout`` seconds for its reply."""
        req_id = self.send(op, **fields)
        return self.wait_reply({req_id}, timeout=timeout)

    def send(self, op: str, **fields: Any) -> int:
        if self._sock is None:
            raise VmError("control channel is not connected")
        req_id = next(self._ids)
        line = json.dumps({"id": req_id, "op": op, **fields}).encode() + b"\n"
        self._sock.settimeout(60)
        try:
            self._sock.sendall(line)
        except OSError as e:
            raise VmError(f"sending {op!r} to the guest agent failed: {e}") from e
        return req_id

    def wait_reply(self, ids: set[int], *, timeout: float) -> dict[str, Any]:
        """The first reply to any of ``ids``; replies to other (abandoned) requests are dropped."""
        deadline = time.monotonic() + timeout
        while True:
            reply = json.loads(self._read_line(deadline))
            if reply.get("id") in ids:
                if "error" in reply:
                    raise VmError(f"guest agent: {reply['error']}")
                return dict(reply)

    def _read_line(self, deadline: float) -> bytes:
        assert self._sock is not None
        while (nl := self._buf.find(b"\n")) < 0:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise VmTimeout("no reply from the guest agent in time")
            self._sock.settimeout(remaining)
            try:
                chunk = self._sock.recv(1 << 20)
            except TimeoutError:
                continue
            if not chunk:
                raise VmError("control channel closed (qemu exited?)")
            self._buf += chunk
        line = bytes(self._buf[:nl])
        del self._buf[: nl + 1]
        return line
