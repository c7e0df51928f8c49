"""Network namespaces for tests and benches: a throwaway "node" netns, the
apiserver made reachable inside it, HTTP reads of its metrics, and its nf_tables events.

A component run with ``ip netns exec`` sees the namespace's own loopback (and no route to the
harness's apiserver address in the root namespace), so this process forwards
``127.0.0.1:API_PORT`` *inside* the namespace to the apiserver: a socket is created in a
namespace by entering it with ``setns(2)`` for the duration of the ``socket()`` call (the
main thread only; a socket keeps the namespace it was created in). TLS passes through
untouched (the apiserver certificate names 127.0.0.1).

Every namespace is named ``na-pxc-<pid>-<tag>``; `sweep_stale` deletes those of dead runs.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import errno
import os
import re
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

PREFIX = "na-pxc-"
NODE_IP = "198.51.100.1"  # TEST-NET-2, on a veth inside the namespace
NODE_DEV = "node0"
PEER_DEV = "node1"
API_PORT = 6443  # inside the namespace (each has its own port space)
CLONE_NEWNET = 0x40000000
NETLINK_NETFILTER = 12
NFNLGRP_NFTABLES = 7
SO_RCVBUFFORCE = 33
_libc = ctypes.CDLL(None, use_errno=True)


def _ip(*args: str, check: bool = True) -> None:
    done = subprocess.run(["ip", *args], capture_output=True, text=True, check=False)
    if check and done.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {done.stderr.strip()}")


@contextlib.contextmanager
def entered(ns: str) -> Iterator[None]:
    """The calling thread inside netns ``ns`` until the block ends."""
    with open("/proc/thread-self/ns/net") as home, open(f"/run/netns/{ns}") as target:
        if _libc.setns(target.fileno(), CLONE_NEWNET) != 0:
            raise OSError(ctypes.get_errno(), f"setns({ns})")
        try:
            yield
        finally:
            if _libc.setns(home.fileno(), CLONE_NEWNET) != 0:  # pragma: no cover
                os._exit(70)  # never carry on in the wrong namespace


def socket_in(ns: str) -> socket.socket:
    with entered(ns):
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setblocking(False)
    return sock


class Netns:
    """``na-pxc-<pid>-<tag>`` with lo up and the node address on a veth (peer inside too)."""

    def __init__(self, tag: str) -> None:
        self.name = f"{PREFIX}{os.getpid()}-{tag}"

    def create(self) -> Netns:
        _ip("netns", "add", self.name)
        try:
            _ip("-n", self.name, "link", "set", "lo", "up")
            # no dummy driver in this kernel: a veth pair with both ends inside
            _ip("-n", self.name, "link", "add", NODE_DEV, "type", "veth", "peer", "name", PEER_DEV)
            _ip("-n", self.name, "addr", "add", f"{NODE_IP}/24", "dev", NODE_DEV)
            _ip("-n", self.name, "link", "set", PEER_DEV, "up")
            _ip("-n", self.name, "link", "set", NODE_DEV, "up")
        except BaseException:
            self.delete()
            raise
        return self

    def delete(self) -> None:
        """Remove the namespace (its nft tables go with it). Its processes must be gone."""
        _ip("netns", "del", self.name, check=False)

    def argv(self, *argv: str) -> list[str]:
        return ["ip", "netns", "exec", self.name, *argv]


def sweep_stale() -> list[str]:
    """Delete ``na-pxc-<pid>-*`` namespaces whose creating process is gone."""
    removed = []
    for path in Path("/run/netns").glob(f"{PREFIX}*"):
        m = re.match(rf"{PREFIX}(\d+)-", path.name)
        if m and not Path(f"/proc/{m.group(1)}").exists():
            _ip("netns", "del", path.name, check=False)
            removed.append(path.name)
    return removed


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        writer.close()


class Forwarder:
    """``127.0.0.1:API_PORT`` inside ``ns`` -> ``host:port`` here (the apiserver)."""

    def __init__(self, ns: str, port: int, *, host: str = "127.0.0.1") -> None:
        self._ns, self._target = ns, (host, port)
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Future[tuple[None, None]]] = set()  # one per connection

    async def start(self) -> Forwarder:
        listener = socket_in(self._ns)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", API_PORT))
        self._server = await asyncio.start_server(self._serve, sock=listener, backlog=128)
        return self

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection(*self._target)
        except OSError:
            writer.close()
            return
        task = asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))
        self._tasks.add(task)
        try:
            await task
        finally:
            self._tasks.discard(task)

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)


async def http_get(ns: str, port: int, path: str, *, within: float = 10.0) -> str:
    """GET http://127.0.0.1:<port><path> inside ``ns``; the body ('' when not answering)."""
    sock = socket_in(ns)
    loop = asyncio.get_running_loop()
    try:
        async with asyncio.timeout(within):
            await loop.sock_connect(sock, ("127.0.0.1", port))
            await loop.sock_sendall(sock, f"GET {path} HTTP/1.0\r\nHost: x\r\n\r\n".encode())
            chunks = []
            while chunk := await loop.sock_recv(sock, 1 << 16):
                chunks.append(chunk)
    except (OSError, TimeoutError):
        return ""
    finally:
        sock.close()
    head, _, body = b"".join(chunks).partition(b"\r\n\r\n")
    return body.decode(errors="replace") if b" 200 " in head.split(b"\r\n", 1)[0] else ""


class NftEvents:
    """The nf_tables netlink event group inside ``ns``: when did a committed object carrying a
    given address appear?

    The kernel multicasts every committed object (table, chain, rule, set element) to
    ``NFNLGRP_NFTABLES`` after the transaction commits, so the first message carrying the new
    address (as 4 network-order bytes, e.g. a ``dnat to`` immediate or a map element, or as
    text in a chain name) marks the change as applied. ``nft monitor`` would decode the same
    events, but nft 1.0.6 first builds a full cache: it spent more than 5 CPU minutes on
    kube-proxy's 10,000-service table without printing a line. Raw messages need no cache.
    """

    PROBE = "na_pxc_probe"

    def __init__(self, ns: Netns) -> None:
        self._ns = ns
        self._sock: socket.socket | None = None
        self._waiting: dict[bytes, asyncio.Future[float]] = {}
        self.messages = 0
        self.overruns = 0

    async def start(self) -> float:
        """Subscribe, then prove it with a probe table; returns how long that took."""
        started = time.monotonic()
        with entered(self._ns.name):
            sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_NETFILTER)
        sock.setblocking(False)
        sock.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, 64 << 20)
        sock.bind((0, 1 << (NFNLGRP_NFTABLES - 1)))
        self._sock = sock
        asyncio.get_running_loop().add_reader(sock.fileno(), self._drain)
        seen = self.expect(self.PROBE.encode())
        nft = self._ns.argv("nft", f"add table ip {self.PROBE}; delete table ip {self.PROBE}")
        await asyncio.to_thread(subprocess.run, nft, check=True)
        await asyncio.wait_for(seen, timeout=30)
        return time.monotonic() - started

    def expect(self, *needles: bytes) -> asyncio.Future[float]:
        """A future set to the monotonic time of the first event containing any needle."""
        future: asyncio.Future[float] = asyncio.get_running_loop().create_future()
        for needle in needles:
            self._waiting[needle] = future
        return future

    def expect_address(self, ip: str) -> asyncio.Future[float]:
        return self.expect(socket.inet_aton(ip), ip.encode())

    def _drain(self) -> None:
        assert self._sock is not None
        while True:
            try:
                data = self._sock.recv(1 << 20)
            except BlockingIOError:
                return
            except OSError as e:  # ENOBUFS: the kernel dropped events while we were slow
                if e.errno != errno.ENOBUFS:
                    raise
                self.overruns += 1
                continue
            now = time.monotonic()
            self.messages += 1
            for needle in [n for n in self._waiting if n in data]:
                future = self._waiting.pop(needle)
                if not future.done():
                    future.set_result(now)

    async def stop(self) -> None:
        if self._sock is not None:
            asyncio.get_running_loop().remove_reader(self._sock.fileno())
            self._sock.close()
            self._sock = None
