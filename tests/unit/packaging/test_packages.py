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
    assert (
        "Depends: python3.11, libc6 (>= 2.34), libgcc-s1, libstdc++6, nftables, conntrack\n"
    ) in fields
    assert "Recommends: containerd | containerd.io\n" in fields


def test_rpm_metadata_names_package_version_arch_and_requirements(packages: Packages) -> None:
    nvra = rpm_query(packages.rpm, "%{NAME} %{VERSION} %{RELEASE} %{ARCH}")
    requires = run("rpm", "-qp", "--requires", packages.rpm).stdout.splitlines()
    recommends = run("rpm", "-qp", "--recommends", packages.rpm).stdout.splitlines()

    assert nvra == f"nodeagent {packages.version} 1 x86_64"
    assert {"/usr/bin/python3.11", "nftables", "conntrack-tools"} <= set(requires)
    assert {"libc.so.6(GLIBC_2.34)(64bit)", "libstdc++.so.6()(64bit)"} <= set(requires)
    assert recommends == ["containerd"]


def test_deb_installs_venv_command_unit_config_and_state_dir_entry(packages: Packages) -> None:
    files = deb_contents(packages.deb)

    assert files["/usr/bin/nodeagent"].link == "/opt/nodeagent/bin/nodeagent"
    assert files["/opt/nodeagent/bin/nodeagent"].mode == "-rwxr-xr-x"
    assert files["/opt/nodeagent/bin/python3.11"].link == "/usr/bin/python3.11"
    assert files["/lib/systemd/system/nodeagent.service"].mode == FILE_0644
    assert files["/etc/nodeagent/config.yaml"].mode == FILE_0644
    assert files["/etc/default/nodeagent"].mode == FILE_0644
    assert files["/etc/nodeagent"].mode == DIR_0755
    # Made 0700 by systemd-tmpfiles, not shipped (policy wants shipped directories 0755).
    assert "/var/lib/nodeagent" not in files
    assert files["/usr/lib/tmpfiles.d/nodeagent.conf"].mode == FILE_0644
    assert "/etc/sysconfig/nodeagent" not in files
    assert "/usr/share/doc/nodeagent/examples/nodeagent.service.d/10-example.conf" in files


def test_rpm_installs_venv_command_unit_config_and_state_dir_entry(packages: Packages) -> None:
    files = rpm_contents(packages.rpm)

    assert files["/usr/bin/nodeagent"].link == "/opt/nodeagent/bin/nodeagent"
    assert files["/opt/nodeagent/bin/nodeagent"].mode == "-rwxr-xr-x"
    assert files["/usr/lib/systemd/system/nodeagent.service"].mode == FILE_0644
    assert files["/etc/nodeagent/config.yaml"].mode == FILE_0644
    assert files["/etc/sysconfig/nodeagent"].mode == FILE_0644
    assert "/var/lib/nodeagent" not in files
    assert files["/usr/lib/tmpfiles.d/nodeagent.conf"].mode == FILE_0644
    assert files["/usr/lib/systemd/system-preset/80-nodeagent.preset"].mode == FILE_0644
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
        # installers name the directory after the normalized project name (dbus-fast ->
        # dbus_fast-5.2.0.dist-info)
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


def test_no_bytecode_is_shipped(packages: Packages) -> None:
    shipped = [*deb_contents(packages.deb), *rpm_contents(packages.rpm)]

    bytecode = [p for p in shipped if "__pycache__" in p or p.endswith((".pyc", ".pyo"))]

    assert bytecode == []


def test_shared_objects_are_stripped(deb_tree: Path) -> None:
    objects = sorted((deb_tree / "opt").rglob("*.so*"))

    unstripped = [
        str(o.relative_to(deb_tree))
        for o in objects
        if ".symtab" in run("readelf", "--section-headers", "--wide", o).stdout
    ]

    assert len(objects) > 20
    assert unstripped == []


def test_library_files_are_not_executable(deb_tree: Path) -> None:
    lib = deb_tree / "opt/nodeagent/lib"

    executable = [
        str(p.relative_to(lib)) for p in lib.rglob("*") if p.is_file() and p.stat().st_mode & 0o111
    ]

    assert executable == []


def test_only_the_agents_command_is_in_the_venvs_bin(deb_tree: Path) -> None:
    names = sorted(p.name for p in (deb_tree / "opt/nodeagent/bin").iterdir())

    assert names == ["nodeagent", "python", "python3", "python3.11"]


@pytest.mark.parametrize("kind", ["deb", "rpm"])
def test_data_member_is_gzip_which_every_supported_dpkg_and_rpm_reads(
    packages: Packages, kind: str
) -> None:
    if kind == "deb":
        members = run("ar", "t", packages.deb).stdout.split()
        assert members == ["debian-binary", "control.tar.gz", "data.tar.gz"]
    else:
        assert rpm_query(packages.rpm, "%{PAYLOADCOMPRESSOR}") == "gzip"


def test_deb_ships_copyright_changelog_man_page_and_lintian_overrides(deb_tree: Path) -> None:
    doc = deb_tree / "usr/share/doc/nodeagent"
    copyright_text = (doc / "copyright").read_text()
    changelog = run("dpkg-parsechangelog", "-l", doc / "changelog.Debian.gz", "-S", "Version")
    page = deb_tree / "usr/share/man/man8/nodeagent.8.gz"
    overrides = (deb_tree / "usr/share/lintian/overrides/nodeagent").read_text()

    assert copyright_text.startswith("Format: https://www.debian.org/doc/packaging-manuals/")
    for pin in (REPO / "requirements/runtime.txt").read_text().splitlines():
        if pin and not pin.startswith("#"):
            name, version = pin.split("==")
            assert f" {version} authors" in copyright_text, f"{name} missing from copyright"
    assert (
        changelog.stdout.strip()
        == run(
            "dpkg-parsechangelog", "-l", REPO / "packaging/changelog", "-S", "Version"
        ).stdout.strip()
    )
    assert page.read_bytes()[:2] == b"\x1f\x8b"
    assert "dir-or-file-in-opt" in overrides


def test_rpm_ships_license_changelog_and_man_page(packages: Packages) -> None:
    flags = dict(
        line.split("|")
        for line in rpm_query(packages.rpm, r"[%{FILENAMES}|%{FILEFLAGS:fflags}\n]").splitlines()
    )
    changelog = run("rpm", "-qp", "--changelog", packages.rpm).stdout

    assert flags["/usr/share/licenses/nodeagent/copyright"] == "l"
    assert flags["/usr/share/man/man8/nodeagent.8.gz"] == "d"
    assert f"- {packages.version}-" in changelog


def test_deb_ships_the_unit_file_from_the_source_tree(deb_tree: Path) -> None:
    shipped = (deb_tree / "lib/systemd/system/nodeagent.service").read_bytes()

    assert shipped == (REPO / "systemd/nodeagent.service").read_bytes()
