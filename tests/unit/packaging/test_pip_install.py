"""``pip install .`` into a fresh venv, as a new user would, then the installed command runs.

Only pyproject.toml decides what gets installed: the dependencies come from a local wheelhouse
holding exactly the pins of requirements/runtime.txt (and the build backend of
requirements/build.txt), installed with ``--no-index``. So a dependency that pyproject.toml
forgets is missing from the venv, whatever the wheelhouse holds, and the command fails as it
did for users (``No module named 'dbus_fast'``). The wheelhouse is downloaded from PyPI once per
pin set into ~/.cache/nodeagent and reused offline after that. About 20 s with a warm cache.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from packaging.utils import canonicalize_name

import nodeagent

REPO = Path(__file__).resolve().parents[3]
PINS = (REPO / "requirements/runtime.txt", REPO / "requirements/build.txt")
SOURCES = ("pyproject.toml", "nodeagent", "cri_protos", "csi_protos")
BASE_PYTHON = os.environ.get("NODEAGENT_BASE_PYTHON", "/usr/bin/python3.11")
# Enough for a cold download of ~40 MB of wheels on a loaded machine.
DOWNLOAD_TIMEOUT_S = 240
INSTALL_TIMEOUT_S = 240


def run(*argv: str | Path, timeout: float = 60, **kw: object) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "PYTHON"))}
    return subprocess.run(
        [str(a) for a in argv], capture_output=True, text=True, timeout=timeout, env=env,
        check=False, **kw,  # type: ignore[arg-type]
    )  # fmt: skip


def wheelhouse() -> Path:
    """The pinned wheels, downloaded once per content of runtime.txt and build.txt."""
    key = hashlib.sha256(b"".join(p.read_bytes() for p in PINS)).hexdigest()[:16]
    cache = Path(os.environ.get("NODEAGENT_CACHE", Path.home() / ".cache/nodeagent"))
    path = cache / "pip-install" / f"wheels-{key}"
    path.parent.mkdir(parents=True, exist_ok=True)
    with (path.parent / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (path / ".complete").exists():
            shutil.rmtree(path, ignore_errors=True)
            args = [f"--requirement={p}" for p in PINS]
            result = run(
                sys.executable, "-m", "pip", "download", "--quiet", "--disable-pip-version-check",
                "--only-binary=:all:", f"--dest={path}", *args, timeout=DOWNLOAD_TIMEOUT_S,
            )  # fmt: skip
            assert result.returncode == 0, f"downloading the pinned wheels failed:\n{result.stderr}"
            (path / ".complete").touch()
    return path


@pytest.fixture(scope="module")
def fresh_venv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A venv of the system Python where only ``pip install .`` put anything."""
    if not Path(BASE_PYTHON).exists():
        pytest.skip(f"{BASE_PYTHON} missing (set NODEAGENT_BASE_PYTHON)")
    work = tmp_path_factory.mktemp("pip-install")
    # A copy of the sources: pip builds in the tree, and the shared tree must get no build/.
    src = work / "src"
    src.mkdir()
    skip = shutil.ignore_patterns("__pycache__", "*.egg-info")
    for name in SOURCES:
        if (REPO / name).is_dir():
            shutil.copytree(REPO / name, src / name, ignore=skip)
        else:
            shutil.copy2(REPO / name, src / name)
    venv = work / "venv"
    created = run(BASE_PYTHON, "-m", "venv", venv)
    assert created.returncode == 0, created.stderr

    installed = run(
        venv / "bin/pip", "install", "--quiet", "--disable-pip-version-check", "--no-index",
        f"--find-links={wheelhouse()}", "--no-compile", src, timeout=INSTALL_TIMEOUT_S,
    )  # fmt: skip

    assert installed.returncode == 0, installed.stderr
    yield venv
    shutil.rmtree(work)


def test_installed_command_prints_its_version(fresh_venv: Path) -> None:
    result = run(fresh_venv / "bin/nodeagent", "--version")

    assert (result.returncode, result.stdout, result.stderr) == (
        0,
        f"nodeagent {nodeagent.__version__}\n",
        "",
    )


def test_installed_command_validates_the_sample_config(fresh_venv: Path) -> None:
    sample = REPO / "nodeagent/config/sample.yaml"

    result = run(fresh_venv / "bin/nodeagent", "config", "validate", "--config", sample)

    assert (result.returncode, result.stderr) == (0, "")


def test_installed_venv_imports_every_shipped_module(fresh_venv: Path) -> None:
    walk = (
        "import importlib, pkgutil, nodeagent, cri_protos, csi_protos\n"
        "for pkg in (nodeagent, cri_protos, csi_protos):\n"
        "    for m in pkgutil.walk_packages(pkg.__path__, pkg.__name__ + '.'):\n"
        "        if not m.name.startswith('nodeagent.testing'):\n"
        "            try:\n"
        "                importlib.import_module(m.name)\n"
        "            except ImportError as e:\n"
        "                print(f'{m.name}: {e!r}')\n"
    )

    result = run(fresh_venv / "bin/python", "-I", "-c", walk)

    assert (result.returncode, result.stderr) == (0, "")
    assert result.stdout == "", "a dependency missing from pyproject.toml?"


def test_pyproject_pulls_in_exactly_the_pinned_closure(fresh_venv: Path) -> None:
    freeze = run(fresh_venv / "bin/python", "-m", "pip", "list", "--format=freeze", "--exclude",
                 "pip", "--exclude", "setuptools", "--exclude", "nodeagent")  # fmt: skip
    pins = {
        canonicalize_name(name): version
        for line in PINS[0].read_text().splitlines()
        if line and not line.startswith("#")
        for name, _, version in [line.partition("==")]
    }

    installed = {
        canonicalize_name(name): version
        for line in freeze.stdout.splitlines()
        for name, _, version in [line.partition("==")]
    }

    assert installed == pins, "runtime.txt's closure differs from what pyproject.toml pulls in"
