"""The .deb installed with dpkg into a throwaway root: it runs, and install, remove, reinstall,
upgrade and purge leave exactly what an operator expects.

dpkg runs with ``--root`` and ``--force-script-chrootless``: the maintainer scripts run on the
host with DPKG_ROOT set and must confine themselves to it. systemd is not running here, so the
scripts take their offline path (deb-systemd-helper, which honours DPKG_ROOT), whose effect is
visible as the ``multi-user.target.wants`` symlink and, after a removal, the unit's mask. The
venv must sit at /opt/nodeagent to run, so commands run in a private mount namespace with
``<root>/opt`` bind-mounted on /opt.
"""

from __future__ import annotations

from packaging_tools import UNIT, DpkgRoot, Packages, in_opt_namespace

WANTS_LINK = f"etc/systemd/system/multi-user.target.wants/{UNIT}"
MASK = f"etc/systemd/system/{UNIT}"


def test_installed_nodeagent_prints_its_version(packages: Packages, dpkg_root: DpkgRoot) -> None:
    dpkg_root.dpkg("-i", packages.deb)
    before = dpkg_root.files()

    result = in_opt_namespace(dpkg_root.path, dpkg_root / "usr/bin/nodeagent", "--version")

    assert (result.returncode, result.stdout) == (0, f"nodeagent {packages.version}\n")
    # Without an interpreter that can run in the foreign root, postinst compiles nothing: the
    # first run writes the bytecode, and only bytecode (prerm deletes it: see the purge test).
    written = {p for p in dpkg_root.files() - before if "/__pycache__" not in p}
    assert written == set()


def test_installed_nodeagent_accepts_the_shipped_default_config(
    packages: Packages, dpkg_root: DpkgRoot
) -> None:
    dpkg_root.dpkg("-i", packages.deb)
    config = dpkg_root / "etc/nodeagent/config.yaml"

    result = in_opt_namespace(
        dpkg_root.path, dpkg_root / "usr/bin/nodeagent", "config", "show", "--config", config
    )

    assert result.returncode == 0, result.stderr
    assert "kind: NodeAgentConfiguration\n" in result.stdout


def test_installed_venv_imports_every_nodeagent_module(
    packages: Packages, dpkg_root: DpkgRoot
) -> None:
    dpkg_root.dpkg("-i", packages.deb)
    walk = (
        "import importlib, pkgutil, nodeagent, cri_protos, csi_protos\n"
        "for pkg in (nodeagent, cri_protos, csi_protos):\n"
        "    prefix = pkg.__name__ + '.'\n"
        "    for m in pkgutil.walk_packages(pkg.__path__, prefix, onerror=lambda n: None):\n"
        "        if m.name.startswith('nodeagent.testing'):\n"
        "            continue\n"
        "        try:\n"
        "            importlib.import_module(m.name)\n"
        "        except ImportError as e:\n"
        "            print(f'{m.name}: {e!r}')\n"
    )

    result = in_opt_namespace(dpkg_root.path, "/opt/nodeagent/bin/python", "-I", "-c", walk)

    assert (result.returncode, result.stderr) == (0, "")
    assert result.stdout == "", f"missing from requirements/runtime.txt?\n{result.stdout}"


def test_install_enables_the_service_and_creates_config_and_state(
    packages: Packages, dpkg_root: DpkgRoot
) -> None:
    dpkg_root.dpkg("-i", packages.deb)

    assert (dpkg_root / WANTS_LINK).readlink().as_posix() == f"/lib/systemd/system/{UNIT}"
    assert (dpkg_root / "etc/nodeagent/config.yaml").is_file()
    assert (dpkg_root / "etc/default/nodeagent").read_text().count("\nNODEAGENT_ARGS=\n") == 1
    assert (dpkg_root / "var/lib/nodeagent").stat().st_mode & 0o777 == 0o700


def test_remove_masks_the_service_and_keeps_config_and_state(
    packages: Packages, dpkg_root: DpkgRoot
) -> None:
    dpkg_root.dpkg("-i", packages.deb)
    config = dpkg_root / "etc/nodeagent/config.yaml"
    config.write_text(config.read_text() + "# edited by the admin\n")
    (dpkg_root / "var/lib/nodeagent/state").write_text("kept")

    dpkg_root.dpkg("--remove", "nodeagent")

    # As debhelper's scripts do: the unit file is gone and masked, the enablement kept for a
    # reinstall to restore.
    assert (dpkg_root / MASK).readlink().as_posix() == "/dev/null"
    assert not (dpkg_root / "opt/nodeagent").exists()
    assert not (dpkg_root / "usr/bin/nodeagent").is_symlink()
    assert config.read_text().endswith("# edited by the admin\n")
    assert (dpkg_root / "var/lib/nodeagent/state").read_text() == "kept"


def test_reinstall_after_remove_enables_again_and_keeps_the_edited_config(
    packages: Packages, dpkg_root: DpkgRoot
) -> None:
    dpkg_root.dpkg("-i", packages.deb)
    config = dpkg_root / "etc/nodeagent/config.yaml"
    config.write_text(config.read_text() + "# edited by the admin\n")
    dpkg_root.dpkg("--remove", "nodeagent")

    dpkg_root.dpkg("-i", packages.deb)

    assert (dpkg_root / WANTS_LINK).is_symlink()
    assert not (dpkg_root / MASK).is_symlink()
    assert config.read_text().endswith("# edited by the admin\n")


def test_upgrade_keeps_a_service_the_admin_disabled_disabled(
    packages: Packages, dpkg_root: DpkgRoot
) -> None:
    dpkg_root.dpkg("-i", packages.deb)
    (dpkg_root / WANTS_LINK).unlink()  # what `systemctl disable` does offline

    dpkg_root.dpkg("-i", packages.deb)  # same version again: dpkg runs the upgrade path

    assert not (dpkg_root / WANTS_LINK).is_symlink()
    assert (dpkg_root / "opt/nodeagent/bin/nodeagent").is_file()


def test_purge_removes_config_state_and_every_installed_file(
    packages: Packages, dpkg_root: DpkgRoot
) -> None:
    dpkg_root.dpkg("-i", packages.deb)
    # A run writes bytecode beside the modules, which prerm must take away again.
    in_opt_namespace(dpkg_root.path, dpkg_root / "usr/bin/nodeagent", "config", "show")
    (dpkg_root / "etc/nodeagent/kubeconfig").write_text("admin-added")
    (dpkg_root / "var/lib/nodeagent/state").write_text("state")

    dpkg_root.dpkg("--purge", "nodeagent")

    leftovers = {p for p in dpkg_root.files() if not (dpkg_root / p).is_dir() or "nodeagent" in p}
    assert leftovers == set()
