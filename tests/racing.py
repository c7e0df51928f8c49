"""A hostile writer for race tests: another process that swaps names in a directory in a loop,
as a container writing its volume (or a hostPath pod writing /var/log) can.

:func:`exchanging` forks a process that exchanges each pair of paths atomically
(``renameat2(RENAME_EXCHANGE)``: a file, a directory and a symlink trade places with no moment
where either name is missing) until the block ends; ``rounds()`` counts the passes over all
pairs, so a test can go on until the race has really run, whatever the machine's load.
"""

from __future__ import annotations

import ctypes
import multiprocessing
import os
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

RENAME_EXCHANGE = 2
AT_FDCWD = -100


def _exchange_forever(pairs: Sequence[tuple[bytes, bytes]], stop: Any, rounds: Any) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    while not stop.is_set():
        for a, b in pairs:
            if libc.renameat2(AT_FDCWD, a, AT_FDCWD, b, RENAME_EXCHANGE) != 0:
                raise OSError(ctypes.get_errno(), "renameat2", a)
        rounds.value += 1


@contextmanager
def exchanging(pairs: Sequence[tuple[Path, Path]]) -> Iterator[Callable[[], int]]:
    """Exchange each pair in another process until the block ends; yields ``rounds()``."""
    fork = multiprocessing.get_context("fork")
    stop, rounds = fork.Event(), fork.Value("l", 0)
    encoded = [(os.fsencode(a), os.fsencode(b)) for a, b in pairs]
    process = fork.Process(target=_exchange_forever, args=(encoded, stop, rounds))
    process.start()
    try:
        yield lambda: int(rounds.value)
    finally:
        stop.set()
        process.join(timeout=30)
        if process.is_alive():
            process.kill()
            process.join()
    assert process.exitcode == 0, f"the exchanging process failed ({process.exitcode})"
