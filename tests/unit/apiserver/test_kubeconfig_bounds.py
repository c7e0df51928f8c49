"""A kubeconfig is bounded like every YAML file an operator controls: size, nesting and alias
expansion are checked before anything is built, and a FIFO or a device is never read."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from bounded import call_budget

from nodeagent.apiserver import load_kubeconfig
from nodeagent.apiserver.kubeconfig import MAX_KUBECONFIG_BYTES
from nodeagent.errors import ConfigError

LAUGHS = 'a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]\n' + "".join(
    f"{chr(98 + i)}: &{chr(98 + i)} [{','.join([f'*{chr(97 + i)}'] * 9)}]\n" for i in range(8)
)

# Under 300 Python calls per refused kubeconfig today; 30x that is unbounded work.
CALLS = 10_000


def refused(path: Path) -> str:
    with pytest.raises(ConfigError) as caught, call_budget(CALLS):  # counted, not timed
        load_kubeconfig(path)
    return str(caught.value)


def test_a_billion_laughs_kubeconfig_is_refused_before_it_expands(tmp_path: Path) -> None:
    path = tmp_path / "kubeconfig"
    path.write_text(LAUGHS)

    assert "aliases expand to more than" in refused(path)


def test_a_deeply_nested_kubeconfig_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "kubeconfig"
    path.write_text("a: " + "[" * 5000 + "]" * 5000 + "\n")

    assert "nested more than 64 levels deep" in refused(path)


def test_a_kubeconfig_bigger_than_the_cap_is_not_read_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "kubeconfig"
    with path.open("wb") as f:  # sparse: 300 MB on paper
        f.truncate(300 * 1024 * 1024)
    read: list[int] = []
    real_read = os.read

    def counting(fd: int, n: int) -> bytes:
        chunk = real_read(fd, n)
        read.append(len(chunk))
        return chunk

    monkeypatch.setattr(os, "read", counting)

    assert f"larger than {MAX_KUBECONFIG_BYTES} bytes" in refused(path)
    assert sum(read) == 0  # its size says it is too big: refused unread


def test_a_fifo_or_a_device_is_refused_without_blocking(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)

    assert "not a regular file" in refused(fifo)
    assert "not a regular file" in refused(Path("/dev/zero"))
