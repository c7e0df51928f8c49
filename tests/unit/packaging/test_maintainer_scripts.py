"""The maintainer scripts inside the built packages, with every systemd command a recorder.

Each case runs one script with the arguments dpkg or rpm would pass, with systemd either
"running" (``/run/systemd/system`` present) or absent (chroot, container, image build), and
asserts the exact calls: the .deb's go through deb-systemd-helper and deb-systemd-invoke (as
debhelper's would), the .rpm's through systemd-update-helper (what the EL9 %systemd_* macros
expand to). Only daemon-reload may reach systemctl directly.
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
    calls: list[str]

    def __str__(self) -> str:
        where = "systemd" if self.systemd_running else "no-systemd"
        return " ".join([self.script, *filter(None, self.args), where])


ENABLE = [
    f"deb-systemd-helper unmask {UNIT}",
    f"deb-systemd-helper --quiet was-enabled {UNIT}",
    f"deb-systemd-helper enable {UNIT}",
]
RELOAD = "systemctl --system daemon-reload"
TMPFILES = "systemd-tmpfiles --create nodeagent.conf"
CASES = [
    # First install: enabled, never started.
    Case("deb/postinst", ("configure", ""), True, [TMPFILES, *ENABLE, RELOAD]),
    Case("deb/postinst", ("configure", ""), False, ENABLE),
    # Upgrade or reinstall: enabled again unless disabled, then restarted (if enabled).
    Case("deb/postinst", ("configure", "0.0.9-1"), True,
         [TMPFILES, *ENABLE, RELOAD, f"deb-systemd-invoke restart {UNIT}"]),
    Case("deb/postinst", ("configure", "0.0.9-1"), False, ENABLE),
    Case("deb/postinst", ("abort-upgrade", "0.2.0-1"), True,
         [TMPFILES, *ENABLE, RELOAD, f"deb-systemd-invoke restart {UNIT}"]),
    # The old agent stops before its files go or are replaced.
    Case("deb/prerm", ("remove",), True, [f"deb-systemd-invoke stop {UNIT}"]),
    Case("deb/prerm", ("upgrade", "0.2.0-1"), True, [f"deb-systemd-invoke stop {UNIT}"]),
    Case("deb/prerm", ("remove",), False, []),
    Case("deb/postrm", ("remove",), True, [RELOAD, f"deb-systemd-helper mask {UNIT}"]),
    Case("deb/postrm", ("remove",), False, [f"deb-systemd-helper mask {UNIT}"]),
    Case("deb/postrm", ("upgrade", "0.2.0-1"), True, []),
    Case("rpm/post", ("1",), True,
         [f"systemd-update-helper install-system-units {UNIT}", TMPFILES]),
    Case("rpm/post", ("2",), True, [TMPFILES]),
    Case("rpm/preun", ("0",), True, [f"systemd-update-helper remove-system-units {UNIT}"]),
    Case("rpm/preun", ("1",), True, []),
    Case("rpm/postun", ("1",), True, [f"systemd-update-helper mark-restart-system-units {UNIT}"]),
    Case("rpm/postun", ("0",), True, []),
]  # fmt: skip


@pytest.mark.parametrize("case", CASES, ids=str)
def test_script_makes_exactly_these_calls(
    scripts: dict[str, Path], tmp_path: Path, case: Case
) -> None:
    result = run_maintainer_script(
        scripts[case.script], *case.args, workdir=tmp_path, systemd_running=case.systemd_running
    )

    assert (result.returncode, result.stderr) == (0, "")
    assert result.calls == case.calls


@pytest.mark.parametrize(("script", "args"), [("rpm/post", ["1"]), ("rpm/preun", ["0"]),
                                              ("rpm/postun", ["1"])])  # fmt: skip
def test_rpm_script_does_nothing_where_systemd_update_helper_does_not_exist(
    scripts: dict[str, Path], tmp_path: Path, script: str, args: list[str]
) -> None:
    result = run_maintainer_script(
        scripts[script], *args, workdir=tmp_path, systemd_running=False, update_helper=False
    )

    assert (result.returncode, result.stderr) == (0, "")
    assert [c for c in result.calls if not c.startswith("systemd-tmpfiles")] == []


def test_deb_purge_says_what_it_leaves_behind(scripts: dict[str, Path], tmp_path: Path) -> None:
    # /var/lib and /etc/nodeagent are the namespace's own (tmpfs, and DPKG_ROOT for /etc).
    script = scripts["deb/postrm"]

    result = run_maintainer_script(script, "purge", workdir=tmp_path, systemd_running=True,
                                   dpkg_root=tmp_path / "root")  # fmt: skip

    assert (result.returncode, result.stderr) == (0, "")
    assert result.calls == [f"deb-systemd-helper purge {UNIT}", f"deb-systemd-helper unmask {UNIT}"]
    assert "containerd" in result.stdout
    assert "nft delete table ip nodeagent" in result.stdout


def test_no_script_calls_systemctl_for_anything_but_daemon_reload(
    scripts: dict[str, Path],
) -> None:
    direct = [
        f"{name}: {line.strip()}"
        for name, path in scripts.items()
        for line in path.read_text().splitlines()
        if "systemctl" in line.split("#")[0] and "daemon-reload" not in line
    ]

    assert direct == []
