"""What the built .deb and .rpm say about themselves: metadata, file list, modes, conffiles."""

from __future__ import annotations

from pathlib import Path

import pytest
from packaging_tools import REPO, Packages, deb_contents, rpm_contents, rpm_query, run

SITE = "/opt/nodeagent/lib/python3.11/site-packages"
DIR_0755 = "drwxr-xr-x"
FILE_0644 = "-rw-r--r--"


def test_deb_metadata_names_package_version_arch_and_dependencies(packages: Packages) -> None:
    fields = run("dpkg-deb", "-f", packages.deb).stdout

    assert f"Package: nodeagent\nVersion: {packages.version}-1\n" in fields
    assert "Architecture: amd64\n" in fields
    assert "Depends: python3.11, nftables, conntrack\n" in fields
    assert "Recommends: containerd | containerd.io\n" in fields


def test_rpm_metadata_names_package_version_arch_and_requirements(packages: Packages) -> None:
    nvra = rpm_query(packages.rpm, "%{NAME} %{VERSION} %{RELEASE} %{ARCH}")
    requires = run("rpm", "-qp", "--requires", packages.rpm).stdout.splitlines()
    recommends = run("rpm", "-qp", "--recommends", packages.rpm).stdout.splitlines()

    assert nvra == f"nodeagent {packages.version} 1 x86_64"
    assert {"/usr/bin/python3.11", "nftables", "conntrack-tools"} <= set(requires)
    assert recommends == ["containerd"]


def test_deb_installs_venv_command_unit_config_and_private_state_dir(packages: Packages) -> None:
    files = deb_contents(packages.deb)

    assert files["/usr/bin/nodeagent"].link == "/opt/nodeagent/bin/nodeagent"
    assert files["/opt/nodeagent/bin/nodeagent"].mode == "-rwxr-xr-x"
    assert files["/opt/nodeagent/bin/python3.11"].link == "/usr/bin/python3.11"
    assert files["/lib/systemd/system/nodeagent.service"].mode == FILE_0644
    assert files["/etc/nodeagent/config.yaml"].mode == FILE_0644
    assert files["/etc/default/nodeagent"].mode == FILE_0644
    assert files["/etc/nodeagent"].mode == DIR_0755
    assert files["/var/lib/nodeagent"].mode == "drwx------"
    assert "/etc/sysconfig/nodeagent" not in files
    assert "/usr/share/doc/nodeagent/examples/nodeagent.service.d/10-example.conf" in files


def test_rpm_installs_venv_command_unit_config_and_private_state_dir(packages: Packages) -> None:
    files = rpm_contents(packages.rpm)

    assert files["/usr/bin/nodeagent"].link == "/opt/nodeagent/bin/nodeagent"
    assert files["/opt/nodeagent/bin/nodeagent"].mode == "-rwxr-xr-x"
    assert files["/usr/lib/systemd/system/nodeagent.service"].mode == FILE_0644
    assert files["/etc/nodeagent/config.yaml"].mode == FILE_0644
    assert files["/etc/sysconfig/nodeagent"].mode == FILE_0644
    assert files["/var/lib/nodeagent"].mode == "drwx------"
    assert "/etc/default/nodeagent" not in files
    assert "/lib/systemd/system/nodeagent.service" not in files


@pytest.mark.parametrize("kind", ["deb", "rpm"])
def test_package_bundles_the_pinned_runtime_dependencies(packages: Packages, kind: str) -> None:
    files = deb_contents(packages.deb) if kind == "deb" else rpm_contents(packages.rpm)
    pins = [
        line.split("==")
        for line in (REPO / "requirements/runtime.txt").read_text().splitlines()
        if line and not line.startswith("#")
    ]

    for name, version in pins:
        # Wheel dist-info directories are named with "-" normalised to "_" (PEP 427).
        dist_info = f"{SITE}/{name.lower().replace('-', '_')}-{version}.dist-info/METADATA"
        assert dist_info in files, f"{name}=={version} is not bundled"
    assert f"{SITE}/nodeagent-{packages.version}.dist-info/METADATA" in files
    assert not any(p.startswith(f"{SITE}/pip") for p in files), "pip is not shipped"


def test_deb_conffiles_are_the_config_and_the_environment_file(packages: Packages) -> None:
    conffiles = run("dpkg-deb", "--info", packages.deb, "conffiles").stdout.split()

    assert sorted(conffiles) == ["/etc/default/nodeagent", "/etc/nodeagent/config.yaml"]


def test_rpm_config_files_are_noreplace(packages: Packages) -> None:
    lines = rpm_query(packages.rpm, r"[%{FILENAMES}|%{FILEFLAGS:fflags}\n]").splitlines()

    config = dict(line.split("|") for line in lines if "c" in line.split("|")[1])

    assert config == {"/etc/nodeagent/config.yaml": "cn", "/etc/sysconfig/nodeagent": "cn"}


def test_venv_is_built_for_its_final_path_and_holds_no_build_paths(deb_tree: Path) -> None:
    root = deb_tree

    shebang = (root / "opt/nodeagent/bin/nodeagent").read_text().splitlines()[0]
    pyvenv = (root / "opt/nodeagent/pyvenv.cfg").read_text()
    leaks = [
        p
        for p in (root / "opt").rglob("*")
        if p.is_file() and not p.is_symlink() and (b"/.cache/" in p.read_bytes())
    ]

    assert shebang == "#!/opt/nodeagent/bin/python"
    assert "home = /usr/bin\n" in pyvenv
    assert "include-system-site-packages = false\n" in pyvenv
    assert leaks == []


def test_bytecode_is_precompiled_with_checked_hashes(deb_tree: Path) -> None:
    site = deb_tree / SITE.lstrip("/")
    sources = sorted(site.rglob("*.py"))

    missing = [s for s in sources if not _pyc_for(s).exists()]
    flags = {_pyc_for(s).read_bytes()[4:8] for s in sources if _pyc_for(s).exists()}

    assert sources
    assert missing == []
    # PEP 552 flags word: bit 0 hash-based, bit 1 check the source hash.
    assert flags == {(3).to_bytes(4, "little")}


def _pyc_for(source: Path) -> Path:
    return source.parent / "__pycache__" / f"{source.stem}.cpython-311.pyc"


def test_deb_ships_the_unit_file_from_the_source_tree(deb_tree: Path) -> None:
    shipped = (deb_tree / "lib/systemd/system/nodeagent.service").read_bytes()

    assert shipped == (REPO / "systemd/nodeagent.service").read_bytes()
