"""Helpers for the package tests: build, read package metadata, run things in throwaway roots.

Every mount made here lives in a private mount namespace (``unshare -m``) of a short-lived
child process, so it disappears with that process whatever happens to the test.
"""

from __future__ import annotations

import dataclasses
import shutil
import subprocess
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
BUILD_SH = REPO / "packaging" / "build.sh"
UNIT = "nodeagent.service"
SYSTEM_PATH = "/usr/sbin:/usr/bin:/sbin:/bin"
PRIVATE_MOUNTS = ("unshare", "--mount", "--propagation", "private")


def run(
    *argv: str | Path, env: dict[str, str] | None = None, check: bool = True
) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(
        [str(a) for a in argv], capture_output=True, text=True, env=env, check=False
    )
    if check and proc.returncode != 0:
        raise AssertionError(
            f"{' '.join(map(str, argv))} exited {proc.returncode}\n"
            f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
        )
    return proc


@dataclasses.dataclass(frozen=True)
class Packages:
    version: str
    deb: Path
    rpm: Path


def build(out: Path, version: str) -> Packages:
    run(BUILD_SH, out)
    return Packages(
        version=version,
        deb=out / f"nodeagent_{version}-1_amd64.deb",
        rpm=out / f"nodeagent-{version}-1.x86_64.rpm",
    )


@dataclasses.dataclass(frozen=True)
class Entry:
    """One file of a package: ``ls -l`` style mode string and, for symlinks, the target."""

    mode: str
    link: str | None = None


def deb_contents(deb: Path) -> dict[str, Entry]:
    entries = {}
    for line in run("dpkg-deb", "-c", deb).stdout.splitlines():
        mode, _owner, _size, _date, _time, name = line.split(maxsplit=5)
        name, _, link = name.partition(" -> ")
        path = "/" + name.removeprefix("./").rstrip("/")
        entries[path] = Entry(mode=mode, link=link or None)
    return entries


def rpm_query(rpm: Path, fmt: str) -> str:
    return run("rpm", "-qp", "--qf", fmt, rpm).stdout


def rpm_contents(rpm: Path) -> dict[str, Entry]:
    entries = {}
    out = rpm_query(rpm, r"[%{FILEMODES:perms}\t%{FILENAMES}\t%{FILELINKTOS}\n]")
    for line in out.splitlines():
        mode, path, link = line.split("\t")
        entries[path] = Entry(mode=mode, link=link or None)
    return entries


def in_opt_namespace(root: Path, *argv: str | Path) -> subprocess.CompletedProcess[str]:
    """Runs argv with ``<root>/opt`` bind-mounted on /opt, where the venv expects to live."""
    script = 'mount --bind "$1/opt" /opt && shift && exec "$@"'
    return run(*PRIVATE_MOUNTS, "sh", "-c", script, "sh", root, *argv, check=False)


class DpkgRoot:
    """An empty root with its own dpkg database; scripts run chrootless with DPKG_ROOT set."""

    def __init__(self) -> None:
        self.path = Path(tempfile.mkdtemp(prefix="nodeagent-dpkg-root-"))
        admin = self.path / "var/lib/dpkg"
        for sub in ("info", "updates", "triggers"):
            (admin / sub).mkdir(parents=True)
        (admin / "status").touch()

    def __truediv__(self, rel: str) -> Path:
        return self.path / rel.lstrip("/")

    def dpkg(self, *args: str | Path) -> subprocess.CompletedProcess[str]:
        return run(
            "dpkg", f"--root={self.path}", "--log=/dev/null", "--force-depends",
            "--force-script-chrootless", *args,
            env={"PATH": SYSTEM_PATH, "LC_ALL": "C"},
        )  # fmt: skip

    def files(self) -> set[str]:
        """Every path in the root except dpkg's own database."""
        return {
            "/" + str(p.relative_to(self.path))
            for p in self.path.rglob("*")
            if not p.is_relative_to(self.path / "var/lib/dpkg")
        }

    def enabled(self) -> bool:
        link = self / f"etc/systemd/system/multi-user.target.wants/{UNIT}"
        return link.is_symlink()

    def remove(self) -> None:
        shutil.rmtree(self.path)


@dataclasses.dataclass(frozen=True)
class ScriptRun:
    returncode: int
    calls: list[str]
    stdout: str
    stderr: str


# The commands maintainer scripts may call to act on systemd, each replaced by a recorder.
RECORDED = ("systemctl", "deb-systemd-helper", "deb-systemd-invoke", "systemd-tmpfiles")
UPDATE_HELPER = "/usr/lib/systemd/systemd-update-helper"  # what the RPM macros call
RECORDER = '#!/bin/sh\nprintf "%s %s\\n" "${0##*/}" "$*" >>"$CALLS"\n'


def run_maintainer_script(
    script: Path,
    *args: str,
    workdir: Path,
    systemd_running: bool,
    update_helper: bool = True,
    dpkg_root: Path | None = None,
) -> ScriptRun:
    """Runs a maintainer script where every systemd command is a recorder.

    In a private mount namespace tmpfs covers /run (holding ``/run/systemd/system`` when systemd
    is to look alive), /var/lib and /opt, so the script cannot touch the host's state or a venv;
    /usr/lib/systemd holds only a recording ``systemd-update-helper`` (or nothing), and the
    recorders shadow systemctl, deb-systemd-helper, deb-systemd-invoke and systemd-tmpfiles on
    PATH and at their absolute paths. ``calls`` lists each call as ``"<command> <args>"``.
    """
    bindir = workdir / "bin"
    bindir.mkdir(exist_ok=True)
    calls = workdir / "calls"
    calls.write_text("")
    for name in RECORDED:
        (bindir / name).write_text(RECORDER)
        (bindir / name).chmod(0o755)
    setup = " && ".join(
        [
            "mount -t tmpfs tmpfs /run",
            "mount -t tmpfs tmpfs /var/lib",
            "mount -t tmpfs tmpfs /opt",
            "mount -t tmpfs tmpfs /usr/lib/systemd",
            *(["mkdir -p /run/systemd/system"] if systemd_running else []),
            *([f'cp "$FAKE_BIN/systemctl" {UPDATE_HELPER}'] if update_helper else []),
            'mount --bind "$FAKE_BIN/systemd-tmpfiles" /usr/bin/systemd-tmpfiles',
            'mount --bind "$FAKE_BIN/systemctl" /usr/bin/systemctl',
            'exec env -i PATH="$FAKE_BIN:$SYSTEM_PATH" CALLS="$CALLS" $ROOT_ENV /bin/sh "$@"',
        ]
    )
    env = {
        "PATH": SYSTEM_PATH,
        "SYSTEM_PATH": SYSTEM_PATH,
        "FAKE_BIN": str(bindir),
        "CALLS": str(calls),
        "ROOT_ENV": f"DPKG_ROOT={dpkg_root}" if dpkg_root else "",
    }
    proc = run(*PRIVATE_MOUNTS, "/bin/sh", "-c", setup, "sh", script, *args, env=env, check=False)
    return ScriptRun(proc.returncode, calls.read_text().splitlines(), proc.stdout, proc.stderr)
