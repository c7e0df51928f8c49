"""Relay one guest TCP connection to a host address (qemu's ``guestfwd=...-cmd:``, per connection).

Usage (qemu runs it): ``python3 relay.py TARGET_FILE LOG_FILE``. The guest connection is fds
0/1 (qemu's slirp hands the child its socket as stdin/stdout/stderr), so nothing may be printed:
stderr goes to LOG_FILE. TARGET_FILE holds ``host:port`` and is read at connection time, so a VM
can boot before the host service it forwards to exists (the apiserver of a test cluster), and the
target is written by the test that starts that service. No target or a refused connection closes
the guest connection at once, which the guest sees as a reset.
"""

from __future__ import annotations

import os
import selectors
import socket
import sys


def relay(guest_in: int, guest_out: int, upstream: socket.socket) -> None:
    sel = selectors.DefaultSelector()
    sel.register(guest_in, selectors.EVENT_READ, "guest")
    sel.register(upstream, selectors.EVENT_READ, "upstream")
    open_sides = 2
    while open_sides:
        for key, _ in sel.select():
            if key.data == "guest":
                data = os.read(guest_in, 1 << 16)
                if data:
                    upstream.sendall(data)
                else:
                    sel.unregister(guest_in)
                    upstream.shutdown(socket.SHUT_WR)
                    open_sides -= 1
            else:
                data = upstream.recv(1 << 16)
                if data:
                    view = memoryview(data)
                    while view:
                        view = view[os.write(guest_out, view) :]
                else:
                    sel.unregister(upstream)
                    return  # upstream closed: closing the guest side ends the connection


def main(argv: list[str]) -> int:
    target_file, log_file = argv
    log = os.open(log_file, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(log, 2)
    try:
        with open(target_file, encoding="ascii") as f:
            host, _, port = f.read().strip().rpartition(":")
        with socket.create_connection((host, int(port)), timeout=10) as upstream:
            upstream.settimeout(None)
            relay(0, 1, upstream)
    except (OSError, ValueError) as e:
        print(f"relay {target_file}: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
