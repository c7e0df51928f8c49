"""Each test session leases a pod bridge and /24 of its own: never `make up`'s na-cni0, never one
a live session holds or that the machine already uses; a dead session's lease is free again."""

from __future__ import annotations

from pathlib import Path

import pytest
from harness.cni import SESSION_INDICES, lease_index, release_index, session_network

FIRST = SESSION_INDICES[0]


def free(_n: int) -> bool:
    return False


def test_sessions_get_different_bridges_and_never_make_ups(tmp_path: Path) -> None:
    a = lease_index(tmp_path, pid=100, in_use=free, alive=lambda pid: True)
    b = lease_index(tmp_path, pid=200, in_use=free, alive=lambda pid: True)

    assert (a, b) == (FIRST, FIRST + 1)
    assert 0 not in SESSION_INDICES
    assert session_network(a, tmp_path).bridge != "na-cni0"
    assert session_network(b, tmp_path).bridge == f"na-cni{FIRST + 1}"
    assert session_network(b, tmp_path).subnet == f"10.244.{FIRST + 1}.0/24"


def test_a_bridge_or_subnet_in_use_is_skipped(tmp_path: Path) -> None:
    n = lease_index(tmp_path, pid=100, in_use=lambda n: n < FIRST + 3, alive=lambda pid: True)

    assert n == FIRST + 3


def test_a_dead_holders_lease_and_a_released_one_are_free_again(tmp_path: Path) -> None:
    a = lease_index(tmp_path, pid=100, in_use=free, alive=lambda pid: True)
    assert lease_index(tmp_path, pid=300, in_use=free, alive=lambda pid: pid != 100) == a

    release_index(tmp_path, a, pid=100)  # not 100's any more: left alone
    assert (tmp_path / str(a)).read_text() == "300\n"
    release_index(tmp_path, a, pid=300)
    assert not (tmp_path / str(a)).exists()
    assert lease_index(tmp_path, pid=400, in_use=free, alive=lambda pid: True) == a


def test_no_free_index_is_an_error_that_says_where_to_look(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError, match="no free pod bridge"):
        lease_index(tmp_path, pid=100, in_use=lambda n: True, alive=lambda pid: True)
