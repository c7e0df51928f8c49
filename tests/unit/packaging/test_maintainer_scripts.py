"""The maintainer scripts inside the built packages, run against a recording fake systemctl.

Each case runs one script with the arguments dpkg or rpm would pass, with systemd either
"running" (``/run/systemd/system`` present) or absent (chroot, container, image build), and
asserts the exact systemctl calls. No case may start the service.
"""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

import pytest
from packaging_tools import Packages, rpm_query, run, run_maintainer_script

UNIT = "nodeagent.service"
RPM_TAGS = {"post": "POSTIN", "preun": "PREUN", "postun": "POSTUN"}


@pytest.fixture(scope="module")
def scripts(packages: Packages, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """``deb/postinst`` ... and ``rpm/post`` ..., extracted from the built packages."""
    out = tmp_path_factory.mktemp("scripts")
    run("dpkg-deb", "-e", packages.deb, out / "deb")
    (out / "rpm").mkdir()
    for name, tag in RPM_TAGS.items():
        (out / "rpm" / name).write_text(rpm_query(packages.rpm, f"%{{{tag}}}"))
    return {f"{kind}/{p.name}": p for kind in ("deb", "rpm") for p in (out / kind).iterdir()}


class Case(NamedTuple):
    script: str
    args: tuple[str, ...]
    systemd_running: bool
    systemctl_calls: list[str]

    def __str__(self) -> str:
        where = "systemd" if self.systemd_running else "no-systemd"
        return " ".join([self.script, *filter(None, self.args), where])


CASES = [
    Case("deb/postinst", ("configure", ""), True, ["daemon-reload", f"enable {UNIT}"]),
    Case("deb/postinst", ("configure", "0.0.9-1"), True, ["daemon-reload", f"try-restart {UNIT}"]),
    Case("deb/postinst", ("configure", ""), False, [f"enable {UNIT}"]),
    Case("deb/postinst", ("configure", "0.0.9-1"), False, []),
    Case("deb/postinst", ("abort-upgrade", "0.0.9-1"), True, []),
    Case("deb/prerm", ("remove",), True, [f"disable --now {UNIT}"]),
    Case("deb/prerm", ("remove",), False, [f"disable {UNIT}"]),
    Case("deb/prerm", ("upgrade", "0.2.0-1"), True, []),
    Case("deb/postrm", ("remove",), True, ["daemon-reload"]),
    Case("deb/postrm", ("upgrade", "0.2.0-1"), True, []),
    Case("deb/postrm", ("remove",), False, []),
    Case("rpm/post", ("1",), True, ["daemon-reload", f"enable {UNIT}"]),
    Case("rpm/post", ("2",), True, ["daemon-reload"]),
    Case("rpm/post", ("1",), False, [f"enable {UNIT}"]),
    Case("rpm/preun", ("0",), True, [f"disable --now {UNIT}"]),
    Case("rpm/preun", ("0",), False, [f"disable {UNIT}"]),
    Case("rpm/preun", ("1",), True, []),
    Case("rpm/postun", ("1",), True, ["daemon-reload", f"try-restart {UNIT}"]),
    Case("rpm/postun", ("0",), True, ["daemon-reload"]),
    Case("rpm/postun", ("1",), False, []),
]


@pytest.mark.parametrize("case", CASES, ids=str)
def test_script_makes_exactly_these_systemctl_calls(
    scripts: dict[str, Path], tmp_path: Path, case: Case
) -> None:
    result = run_maintainer_script(
        scripts[case.script], *case.args, workdir=tmp_path, systemd_running=case.systemd_running
    )

    assert result.returncode == 0, result.stderr
    assert result.systemctl_calls == case.systemctl_calls


@pytest.mark.parametrize(
    ("script", "args"),
    [
        ("deb/postinst", ["configure", ""]),
        ("deb/prerm", ["remove"]),
        # Not "purge": without DPKG_ROOT it would delete the host's /etc/nodeagent. The purge
        # is exercised through dpkg --root in test_installed_deb.py.
        ("deb/postrm", ["remove"]),
        ("rpm/post", ["1"]),
        ("rpm/preun", ["0"]),
        ("rpm/postun", ["1"]),
    ],
)
def test_script_succeeds_where_systemctl_does_not_exist(
    scripts: dict[str, Path], tmp_path: Path, script: str, args: list[str]
) -> None:
    result = run_maintainer_script(
        scripts[script], *args, workdir=tmp_path, systemd_running=False, systemctl=False
    )

    assert result.returncode == 0, result.stderr
    assert result.stderr == ""


def test_no_script_ever_starts_the_service(scripts: dict[str, Path]) -> None:
    starting = [
        f"{name}: {line.strip()}"
        for name, path in scripts.items()
        for line in path.read_text().splitlines()
        if "systemctl" in line and any(f" {verb} " in f"{line} " for verb in ("start", "restart"))
    ]

    assert starting == []
