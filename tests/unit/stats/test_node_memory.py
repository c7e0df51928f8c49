"""``memory.available`` between two summaries: MemFree + Inactive(file) of /proc/meminfo."""

from __future__ import annotations

from pathlib import Path

from nodeagent.stats.node import memory_available

MEMINFO = """MemTotal:       16384000 kB
MemFree:         2048000 kB
MemAvailable:    9000000 kB
Active(file):    3000000 kB
Inactive(file):  1024000 kB
"""


def test_memory_available_is_free_memory_plus_the_inactive_page_cache(tmp_path: Path) -> None:
    (tmp_path / "meminfo").write_text(MEMINFO)
    assert memory_available(str(tmp_path)) == (2048000 + 1024000) * 1024


def test_a_missing_field_counts_as_zero(tmp_path: Path) -> None:
    (tmp_path / "meminfo").write_text("MemFree:         2048 kB\n")
    assert memory_available(str(tmp_path)) == 2048 * 1024


def test_an_unreadable_meminfo_is_no_figure(tmp_path: Path) -> None:
    assert memory_available(str(tmp_path / "absent")) is None


def test_the_hosts_meminfo_gives_a_figure() -> None:
    available = memory_available()
    assert available is not None
    assert available > 0
