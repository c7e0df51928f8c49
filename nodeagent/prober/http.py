"""The httpGet probe (the kubelet's ``pkg/probe/http``) over a small HTTP/1.1 client.

One GET per attempt with ``Connection: close`` (the kubelet disables keep-alives), the probe's
headers, ``User-Agent: kube-probe/<major.minor>`` and ``Accept: */*`` unless the probe sets
them; HTTPS without certificate verification. 2xx is success, 3xx a success with a warning
(``Probe terminated redirects``), anything else ``HTTP probe failed with statuscode: <code>``.
Redirects are followed, at most 10, while they stay on the same host; a redirect to another
host ends the probe with that 3xx response. At most 10 KiB of the body is read. Connection
errors and timeouts are failures with Go's ``Get "<url>": ...`` wording.
"""

from __future__ import annotations

import asyncio
import ssl
import urllib.parse
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Final, Protocol

from nodeagent.prober.outcome import (
    MAX_OUTPUT,
    Outcome,
    ProbeOutcome,
    capped,
    dial_error,
    failure,
    join_host_port,
    success,
)
from nodeagent.prober.sockio import open_socket_stream

MAX_REDIRECTS: Final = 10
TIMEOUT_TEXT: Final = "context deadline exceeded (Client.Timeout exceeded while awaiting headers)"


class Reader(Protocol):
    async def readline(self) -> bytes: ...

    async def read(self, n: int = -1) -> bytes: ...

    async def readexactly(self, n: int) -> bytes: ...


class Writer(Protocol):
    def write(self, data: bytes) -> None: ...

    async def drain(self) -> None: ...

    def close(self) -> None: ...


Opener = Callable[[str, int, ssl.SSLContext | None, str | None], Awaitable[tuple[Reader, Writer]]]


async def open_stream(
    host: str, port: int, tls: ssl.SSLContext | None, server_hostname: str | None
) -> tuple[Reader, Writer]:
    """HTTPS over asyncio's streams; plain HTTP over the socket itself (``sockio``)."""
    if tls is None:
        return await open_socket_stream(host, port)
    return await asyncio.open_connection(host, port, ssl=tls, server_hostname=server_hostname)


_TLS: ssl.SSLContext | None = None


def insecure_tls() -> ssl.SSLContext:
    """One client context without verification (``InsecureSkipVerify``), built once."""
    global _TLS  # noqa: PLW0603 - a cache: building a context costs milliseconds
    if _TLS is None:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        _TLS = context
    return _TLS


@dataclass(frozen=True, slots=True)
class Response:
    status: int
    headers: dict[str, str]
    body: bytes


class _HttpError(Exception):
    def __init__(self, message: str, url: str | None = None) -> None:
        super().__init__(message)
        self.url = url


def probe_url(scheme: str, host: str, port: int, path: str) -> str:
    """``formatURL``: the path (with its query) on ``scheme://host:port``."""
    parsed = urllib.parse.urlsplit(path)
    return urllib.parse.urlunsplit(
        (scheme.lower(), join_host_port(host, port), parsed.path, parsed.query, parsed.fragment)
    )


def request_headers(headers: Sequence[tuple[str, str]], user_agent: str) -> list[tuple[str, str]]:
    """The probe's headers (a ``Host`` header names the virtual host), plus the defaults."""
    out = list(headers)
    names = {name.lower() for name, _ in out}
    if "user-agent" not in names:
        out.append(("User-Agent", user_agent))
    if "accept" not in names:
        out.append(("Accept", "*/*"))
    return out


async def _read_body(reader: Reader, headers: dict[str, str]) -> bytes:
    if headers.get("transfer-encoding", "").lower() == "chunked":
        body = b""
        while len(body) < MAX_OUTPUT:
            size_line = await reader.readline()
            if not size_line:
                break
            size = int(size_line.split(b";")[0].strip() or b"0", 16)
            if size == 0:
                break
            wanted = min(size, MAX_OUTPUT - len(body))  # not more than is kept, whatever it claims
            body += await reader.readexactly(wanted)
            if wanted < size:
                break
            await reader.readline()
        return body[:MAX_OUTPUT]
    length = headers.get("content-length")
    if length is not None and length.isdigit():
        wanted = min(int(length), MAX_OUTPUT)
        body = b""
        while len(body) < wanted:
            chunk = await reader.read(wanted - len(body))
            if not chunk:
                break
            body += chunk
        return body
    body = b""
    while len(body) < MAX_OUTPUT:
        chunk = await reader.read(MAX_OUTPUT - len(body))
        if not chunk:
            break
        body += chunk
    return body


async def _get_once(opener: Opener, url: str, headers: Sequence[tuple[str, str]]) -> Response:
    parts = urllib.parse.urlsplit(url)
    host = parts.hostname or ""
    port = parts.port or (443 if parts.scheme == "https" else 80)
    tls = insecure_tls() if parts.scheme == "https" else None
    try:
        reader, writer = await opener(host, port, tls, host)
    except OSError as e:
        raise _HttpError(dial_error(join_host_port(host, port), e)) from e
    try:
        target = parts.path or "/"
        if parts.query:
            target += "?" + parts.query
        host_header = next((v for n, v in headers if n.lower() == "host"), parts.netloc)
        lines = [f"GET {target} HTTP/1.1", f"Host: {host_header}"]
        lines += [f"{n}: {v}" for n, v in headers if n.lower() not in ("host", "connection")]
        lines.append("Connection: close")
        writer.write(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1", errors="replace"))
        await writer.drain()
        status_line = await reader.readline()
        fields = status_line.split(None, 2)
        if len(fields) < 2 or not fields[0].startswith(b"HTTP/") or not fields[1].isdigit():
            raise _HttpError(
                "net/http: HTTP/1.x transport connection broken: malformed HTTP response"
            )
        response_headers: dict[str, str] = {}
        while True:
            line = await reader.readline()
            if line in (b"\r\n", b"\n", b""):
                break
            name, _, value = line.decode("latin-1").partition(":")
            response_headers[name.strip().lower()] = value.strip()
        body = await _read_body(reader, response_headers)
        return Response(int(fields[1]), response_headers, body)
    except (OSError, asyncio.IncompleteReadError, ValueError) as e:
        if isinstance(e, _HttpError):
            raise
        raise _HttpError(str(e) or type(e).__name__) from e
    finally:
        writer.close()


async def http_get(opener: Opener, url: str, headers: Sequence[tuple[str, str]]) -> Response:
    """GET ``url``, following same-host redirects; raises ``_HttpError`` with Go's text."""
    first_host = urllib.parse.urlsplit(url).hostname
    for _ in range(MAX_REDIRECTS):
        response = await _get_once(opener, url, headers)
        location = response.headers.get("location")
        if response.status not in (301, 302, 303, 307, 308) or not location:
            return response
        target = urllib.parse.urljoin(url, location)
        if urllib.parse.urlsplit(target).hostname != first_host:
            return response  # http.ErrUseLastResponse
        url = target
    raise _HttpError("stopped after 10 redirects", url)


async def http_probe(
    opener: Opener,
    url: str,
    headers: Sequence[tuple[str, str]],
    seconds: float,
) -> ProbeOutcome:
    try:
        async with asyncio.timeout(seconds):
            response = await http_get(opener, url, headers)
    except TimeoutError:
        return failure(f'Get "{url}": {TIMEOUT_TEXT}')
    except _HttpError as e:
        return failure(f'Get "{e.url or url}": {e}')
    body = capped(response.body)
    if 200 <= response.status < 400:
        if response.status >= 300:
            return ProbeOutcome(
                Outcome.WARNING, f"Probe terminated redirects, Response body: {body}"
            )
        return success(body)
    return failure(f"HTTP probe failed with statuscode: {response.status}")
