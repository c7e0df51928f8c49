"""Making keys, CSRs and certificates in a short-lived child process.

``cryptography`` brings its own OpenSSL: importing it adds ~10 MiB to the RSS of the process
for as long as it lives, and the agent needs it only for a moment at first start and at each
rotation. :func:`run` calls a module-level function of nodeagent in ``python -m
nodeagent.certificate.isolated`` (the agent's own interpreter) and returns its result; the
agent itself reads certificates with :mod:`nodeagent.certificate.der` and never imports
``cryptography``. Arguments and results are pickled (bytes, strings, plain data); the child's
exception is raised again here.
"""

from __future__ import annotations

import asyncio
import importlib
import pickle
import subprocess
import sys
from collections.abc import Callable
from typing import Any, Final, Protocol, TypeVar

from nodeagent.errors import AgentError

T = TypeVar("T")

TIMEOUT: Final = 60.0


class IsolatedError(AgentError):
    pass


def run(fn: Callable[..., T], *args: Any) -> T:
    """``fn(*args)`` in a child process (blocking: call from a thread or at startup)."""
    request = pickle.dumps((fn.__module__, fn.__qualname__, args))
    try:
        done = subprocess.run(
            [sys.executable, "-m", __name__],
            input=request,
            capture_output=True,
            timeout=TIMEOUT,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        raise IsolatedError(f"{fn.__qualname__}: cannot run the certificate helper: {e}") from e
    if done.returncode != 0 or not done.stdout:
        tail = done.stderr.decode(errors="replace").strip().splitlines()[-1:] or ["no output"]
        raise IsolatedError(
            f"{fn.__qualname__}: certificate helper exited with {done.returncode}: {tail[0]}"
        )
    ok, value = pickle.loads(done.stdout)
    if not ok:
        raise value
    result: T = value
    return result


async def call(fn: Callable[..., T], *args: Any) -> T:
    """:func:`run` without blocking the event loop."""
    return await asyncio.to_thread(run, fn, *args)


async def in_process(fn: Callable[..., T], *args: Any) -> T:
    """``fn(*args)`` here: what unit tests inject instead of :func:`call` (no real time
    passes, so virtual-clock tests stay exact)."""
    return fn(*args)


class Isolate(Protocol):
    async def __call__(self, fn: Callable[..., T], *args: Any) -> T: ...


def _serve() -> int:
    module, name, args = pickle.loads(sys.stdin.buffer.read())
    if not module.startswith("nodeagent."):
        print(f"refusing {module}.{name}: not a nodeagent function", file=sys.stderr)
        return 2
    fn: Any = importlib.import_module(module)
    for part in name.split("."):
        fn = getattr(fn, part)
    try:
        answer = (True, fn(*args))
    except Exception as e:
        answer = (False, e)
    sys.stdout.buffer.write(pickle.dumps(answer))
    return 0


if __name__ == "__main__":
    sys.exit(_serve())
