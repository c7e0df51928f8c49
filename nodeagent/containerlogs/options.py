"""The query of ``/containerLogs/{namespace}/{pod}/{container}``: the kubelet's
``PodLogOptions``, decoded and validated with the API server's messages.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final, Literal

from nodeagent.containerlogs.cri import STDERR, STDOUT

Stream = Literal["All", "Stdout", "Stderr"]
STREAMS: Final[tuple[Stream, ...]] = ("All", "Stdout", "Stderr")


class LogOptionsError(ValueError):
    """A bad query: the message names the field and the value."""


@dataclass(frozen=True, slots=True)
class LogOptions:
    follow: bool = False
    previous: bool = False
    timestamps: bool = False
    tail_lines: int | None = None
    limit_bytes: int | None = None
    since_ns: int | None = None
    """Only lines at or after this moment (nanoseconds since the epoch)."""
    stream: Stream = "All"

    def wants(self, stream: bytes) -> bool:
        if self.stream == "All":
            return True
        return stream == (STDOUT if self.stream == "Stdout" else STDERR)


def _bool(query: Mapping[str, str], name: str) -> bool:
    value = query.get(name)
    if value is None:
        return False
    if value.lower() in ("", "true", "1"):
        return True
    if value.lower() in ("false", "0"):
        return False
    raise LogOptionsError(f"{name}: Invalid value: {value!r}: must be true or false")


def _int(query: Mapping[str, str], name: str, minimum: int, rule: str) -> int | None:
    value = query.get(name)
    if value is None:
        return None
    try:
        number = int(value)
    except ValueError:
        raise LogOptionsError(f"{name}: Invalid value: {value!r}: must be an integer") from None
    if number < minimum:
        raise LogOptionsError(f"{name}: Invalid value: {number}: {rule}")
    return number


def parse_options(query: Mapping[str, str], *, now: dt.datetime) -> LogOptions:
    """Decode the query; ``now`` anchors ``sinceSeconds``."""
    tail = _int(query, "tailLines", 0, "must be greater than or equal to 0")
    limit = _int(query, "limitBytes", 1, "must be greater than 0")
    since_seconds = _int(query, "sinceSeconds", 1, "must be greater than 0")
    since_time = query.get("sinceTime")
    if since_seconds is not None and since_time is not None:
        raise LogOptionsError("at most one of `sinceTime` or `sinceSeconds` may be specified")
    since_ns: int | None = None
    if since_seconds is not None:
        since_ns = int((now.timestamp() - since_seconds) * 1e9)
    elif since_time is not None:
        try:
            moment = dt.datetime.fromisoformat(since_time)
        except ValueError:
            raise LogOptionsError(
                f"sinceTime: Invalid value: {since_time!r}: must be an RFC 3339 time"
            ) from None
        if moment.tzinfo is None:
            raise LogOptionsError(
                f"sinceTime: Invalid value: {since_time!r}: must be an RFC 3339 time"
            )
        since_ns = int(moment.timestamp()) * 1_000_000_000 + moment.microsecond * 1000
    stream = query.get("stream", "All")
    if stream not in STREAMS:
        raise LogOptionsError(
            f'stream: Unsupported value: "{stream}": supported values: "All", "Stderr", "Stdout"'
        )
    if stream != "All" and tail is not None:
        raise LogOptionsError(
            "tailLines: Forbidden: `tailLines` and specific `stream` are mutually exclusive for now"
        )
    return LogOptions(
        follow=_bool(query, "follow"),
        previous=_bool(query, "previous"),
        timestamps=_bool(query, "timestamps"),
        tail_lines=tail,
        limit_bytes=limit,
        since_ns=since_ns,
        stream=stream,
    )
