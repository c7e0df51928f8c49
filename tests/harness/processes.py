"""Start, watch and stop the harness's child processes (etcd, kube-apiserver, ...).

Test processes die with the test run: they get ``PR_SET_PDEATHSIG`` (SIGKILL: a graceful
kube-apiserver shutdown can hang once its etcd is gone), so even a killed pytest leaves no
strays. The signal fires when the *thread* that started them exits, so start them from the main
thread, not from `asyncio.to_thread`. Detached processes (``make up``) run in their own session
and outlive the command; they are found again by pid plus the binary path in
``/proc/<pid>/cmdline``.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

PR_SET_PDEATHSIG = 1
POLL_SECONDS = 0.2


def _die_with_parent() -> None:  # runs in the child between fork and exec
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def is_running(pid: int, *, binary: str | None = None) -> bool:
    """True when `pid` exists, is not a zombie and (if given) runs `binary`."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except (FileNotFoundError, ProcessLookupError):
        return False
    state = stat.rpartition(")")[2].split()[0]
    if state in {"Z", "X"}:
        return False
    return binary is None or cmdline.split(b"\0")[0] == binary.encode()


def tail(path: Path, lines: int = 40) -> str:
    try:
        text = path.read_text(errors="replace")
    except FileNotFoundError:
        return f"({path} does not exist)"
    return "\n".join(text.splitlines()[-lines:])


@dataclass(kw_only=True)
class Proc:
    """One started process and its log file."""

    name: str
    argv: tuple[str, ...]
    log: Path
    pid: int
    popen: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    def alive(self) -> bool:
        if self.popen is not None:
            return self.popen.poll() is None
        return is_running(self.pid, binary=self.argv[0])

    def stop(self, *, timeout: float = 10.0) -> None:
        """SIGTERM, then SIGKILL after `timeout` seconds; reap it if it is our child."""
        stop_pid(self.pid, binary=self.argv[0], timeout=timeout, popen=self.popen)

    def tail(self, lines: int = 40) -> str:
        return tail(self.log, lines)


def start(
    *,
    name: str,
    argv: Sequence[str],
    log: Path,
    detached: bool = False,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
) -> Proc:
    """Start `argv` with stdout and stderr appended to `log`."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("ab") as out:
        popen = subprocess.Popen(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=cwd,
            start_new_session=detached,
            preexec_fn=None if detached else _die_with_parent,  # noqa: PLW1509
        )
    return Proc(name=name, argv=tuple(argv), log=log, pid=popen.pid, popen=popen)


def stop_pid(
    pid: int,
    *,
    binary: str | None,
    timeout: float = 10.0,
    popen: subprocess.Popen[bytes] | None = None,
) -> None:
    if popen is None and not is_running(pid, binary=binary):
        return
    if popen is not None and popen.poll() is not None:
        return
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    if not _wait_gone(pid, binary=binary, popen=popen, timeout=timeout):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            return
        _wait_gone(pid, binary=binary, popen=popen, timeout=timeout)


def _wait_gone(
    pid: int, *, binary: str | None, popen: subprocess.Popen[bytes] | None, timeout: float
) -> bool:
    if popen is not None:
        try:
            popen.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return False
        return True
    deadline = time.monotonic() + timeout
    while is_running(pid, binary=binary):
        if time.monotonic() > deadline:
            return False
        time.sleep(POLL_SECONDS)
    return True


class StartupError(RuntimeError):
    """A component died or never became ready; the message carries its log tail."""


def wait_for(
    check: Callable[[], bool],
    *,
    what: str,
    timeout: float,
    watch: Sequence[Proc] = (),
) -> None:
    """Poll `check` until true. Fail fast, with its log tail, if a watched process exits."""
    deadline = time.monotonic() + timeout
    while True:
        for proc in watch:
            if not proc.alive():
                raise StartupError(
                    f"{proc.name} exited while waiting for {what}; last log lines:\n{proc.tail()}"
                )
        if check():
            return
        if time.monotonic() > deadline:
            tails = "\n".join(f"--- {p.name} ({p.log})\n{p.tail()}" for p in watch)
            raise StartupError(f"timed out after {timeout:.0f}s waiting for {what}\n{tails}")
        time.sleep(POLL_SECONDS)
