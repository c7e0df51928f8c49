"""`make up` restarts a running node whose agent started from other code than the tree's: the
stamp changes with a module's edit, a new module and a removed one, and not otherwise."""

from __future__ import annotations

import os
from pathlib import Path

from harness.node_up import code_stamp


def package(tmp_path: Path) -> Path:
    root = tmp_path / "nodeagent"
    (root / "proxy").mkdir(parents=True)
    (root / "__init__.py").write_text("")
    (root / "proxy" / "sync.py").write_text("x = 1\n")
    return root


def test_the_stamp_is_stable_while_nothing_changes(tmp_path: Path) -> None:
    root = package(tmp_path)
    assert code_stamp(root) == code_stamp(root)


def test_an_edit_a_new_module_and_a_removed_one_each_change_the_stamp(tmp_path: Path) -> None:
    root = package(tmp_path)
    seen = {code_stamp(root)}
    module = root / "proxy" / "sync.py"
    module.write_text("x = 2\n")  # same size: the mtime tells
    info = module.stat()
    os.utime(module, ns=(info.st_atime_ns, info.st_mtime_ns + 1_000_000))
    seen.add(code_stamp(root))
    (root / "proxy" / "new.py").write_text("")
    seen.add(code_stamp(root))
    (root / "proxy" / "new.py").unlink()
    (root / "__init__.py").unlink()
    seen.add(code_stamp(root))
    assert len(seen) == 4
