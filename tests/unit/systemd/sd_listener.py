"""A stand-in for systemd's notification socket: a real AF_UNIX datagram socket."""

from __future__ import annotations

import socket


class NotifyListener:
    """Bound where ``NOTIFY_SOCKET`` points; ``env_value`` is what to put in that variable."""

    def __init__(self, *, env_value: str) -> None:
        self.env_value = env_value
        address: str | bytes = env_value
        if env_value.startswith("@"):
            address = b"\0" + env_value[1:].encode()
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(address)

    def receive(self, timeout: float = 5.0) -> str:
        """The next datagram; the timeout only guards against a hang."""
        self.sock.settimeout(timeout)
        return self.sock.recv(65536).decode()

    def drain(self) -> list[str]:
        """Every datagram already queued, without waiting."""
        self.sock.setblocking(False)
        messages = []
        try:
            while True:
                messages.append(self.sock.recv(65536).decode())
        except BlockingIOError:
            return messages

    def close(self) -> None:
        self.sock.close()
