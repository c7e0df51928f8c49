"""A CSI driver for integration tests: the harness's hostpath driver (``csi-hostpath``: the
plugin and the node-driver-registrar) with the external-provisioner, external-resizer and
external-attacher, as processes of the test on the real control plane, registering with the
agent through its ``<rootDir>/plugins_registry``.

The binaries are the harness's (``harness.csi_build.ensure_csi``); ``NODEAGENT_CSI_BIN`` names
a directory holding ``csi-hostpath``, ``csi-provisioner``, ``csi-resizer`` and
``csi-attacher`` built elsewhere instead. Each test's driver has a name of its own
(``<ns>.hostpath.csi.k8s.io``), so tests on one control plane never share a CSIDriver, and
short socket paths (unix sockets stop at 108 bytes). The CSIDriver (attach as asked, pod info
on mount, fsGroupPolicy File, persistent and ephemeral) and a StorageClass of the driver
(expansion allowed) are created and deleted with it.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from harness import processes
from harness.containerd import unmount_and_remove
from harness.controlplane import ControlPlane


def binaries() -> dict[str, Path]:
    override = os.environ.get("NODEAGENT_CSI_BIN")
    if override:
        base = Path(override)
        names = ("csi-hostpath", "csi-provisioner", "csi-resizer", "csi-attacher")
        return {n: base / n for n in names}
    from harness import csi_build

    found: dict[str, Path] = csi_build.ensure_csi(quiet=True)
    return found


@dataclass
class Driver:
    name: str
    storage_class: str
    dir: Path
    plugin: processes.Proc | None = None
    procs: list[processes.Proc] = field(default_factory=list)

    @property
    def socket(self) -> Path:
        return self.dir / "csi.sock"

    @property
    def data(self) -> Path:
        return self.dir / "data"

    def freeze(self) -> None:
        """SIGSTOP the plugin: every CSI call to it hangs until :meth:`thaw`."""
        assert self.plugin is not None
        os.kill(self.plugin.pid, signal.SIGSTOP)

    def thaw(self) -> None:
        assert self.plugin is not None
        os.kill(self.plugin.pid, signal.SIGCONT)

    def logs(self) -> str:
        return "\n".join(f"--- {p.name}\n{p.tail(30)}" for p in self.procs)


def _volumes_of(control_plane: ControlPlane, storage_class: str) -> list[str]:
    listing = control_plane.kubectl("get", "pv", "-o", "json", check=False)
    if listing.returncode != 0:
        return []
    return [
        pv["metadata"]["name"]
        for pv in json.loads(listing.stdout).get("items", [])
        if (pv.get("spec") or {}).get("storageClassName") == storage_class
    ]


def _release_volumes(control_plane: ControlPlane, namespace: str, storage_class: str) -> None:
    """Delete the namespace's claims while the provisioner still runs, so it deletes their
    volumes; whatever it did not delete in a minute loses its finalizers and goes."""
    ns = ("-n", namespace)
    control_plane.kubectl("delete", "statefulsets,pods", "--all", *ns, "--wait=false", check=False)
    control_plane.kubectl("delete", "pvc", "--all", *ns, "--wait=false", check=False)
    deadline = time.monotonic() + 60
    while _volumes_of(control_plane, storage_class) and time.monotonic() < deadline:
        time.sleep(1)
    for name in _volumes_of(control_plane, storage_class):
        control_plane.kubectl(
            "patch",
            "pv",
            name,
            "--type=merge",
            "-p",
            '{"metadata":{"finalizers":null}}',
            check=False,
        )
        control_plane.kubectl("delete", "pv", name, "--wait=false", check=False)


def _apply(control_plane: ControlPlane, obj: dict[str, object]) -> None:
    control_plane.kubectl("apply", "-f", "-", input=json.dumps(obj))


@contextlib.contextmanager
def hostpath_driver(
    control_plane: ControlPlane,
    *,
    node: str,
    namespace: str,
    root_dir: Path,
    log_dir: Path,
    sidecars: tuple[str, ...] = ("csi-provisioner", "csi-resizer"),
    binding: str = "WaitForFirstConsumer",
    attach: bool = False,
    parameters: dict[str, str] | None = None,
) -> Iterator[Driver]:
    """``sidecars``: the controller-side programs to run too (none for inline volumes);
    ``binding``: the StorageClass's ``volumeBindingMode``; ``attach``: the CSIDriver's
    ``attachRequired`` (give ``csi-attacher`` among the sidecars then); ``parameters``: the
    StorageClass's (``csi.storage.k8s.io/fstype: tmpfs`` makes each volume a tmpfs of its
    size, mounted on its directory in the driver's data dir)."""
    bins = binaries()
    name = f"{namespace}.hostpath.csi.k8s.io"
    short = Path(tempfile.mkdtemp(prefix="na-csi-"))
    driver = Driver(name=name, storage_class=f"csi-{namespace}", dir=short)
    driver.data.mkdir()
    registry = root_dir / "plugins_registry"
    registry.mkdir(parents=True, exist_ok=True)
    csidriver = {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "CSIDriver",
        "metadata": {"name": name},
        "spec": {
            "attachRequired": attach,
            "podInfoOnMount": True,
            "fsGroupPolicy": "File",
            "volumeLifecycleModes": ["Persistent", "Ephemeral"],
        },
    }
    storage_class = {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "StorageClass",
        "metadata": {"name": driver.storage_class},
        "provisioner": name,
        "allowVolumeExpansion": True,
        "volumeBindingMode": binding,
        "parameters": parameters or {},
    }
    kubeconfig = str(control_plane.admin_kubeconfig)
    hostpath = str(bins["csi-hostpath"])
    try:
        _apply(control_plane, csidriver)
        _apply(control_plane, storage_class)
        driver.plugin = processes.start(
            name="hostpathplugin",
            argv=[
                hostpath,
                "hostpathplugin",
                f"--drivername={name}",
                f"--endpoint=unix://{driver.socket}",
                f"--nodeid={node}",
                f"--datadir={driver.data}",
            ],
            log=log_dir / "hostpathplugin.log",
        )
        driver.procs.append(driver.plugin)
        processes.wait_for(driver.socket.exists, what="the driver's socket", timeout=30)
        driver.procs.append(
            processes.start(
                name="node-driver-registrar",
                argv=[
                    hostpath,
                    "csi-node-driver-registrar",
                    f"--csi-address={driver.socket}",
                    f"--kubelet-registration-path={driver.socket}",
                    f"--plugin-registration-path={registry}",
                ],
                log=log_dir / "registrar.log",
            )
        )
        for sidecar in sidecars:
            driver.procs.append(
                processes.start(
                    name=sidecar,
                    argv=[
                        str(bins[sidecar]),
                        f"--csi-address={driver.socket}",
                        f"--kubeconfig={kubeconfig}",
                        "--leader-election=false",
                        "--v=3",
                    ],
                    log=log_dir / f"{sidecar}.log",
                )
            )
        yield driver
    finally:
        if driver.plugin is not None and driver.plugin.alive():
            with contextlib.suppress(ProcessLookupError):
                os.kill(driver.plugin.pid, signal.SIGCONT)
        _release_volumes(control_plane, namespace, driver.storage_class)
        for proc in reversed(driver.procs):
            proc.stop()
        for kind, obj_name in (("storageclass", driver.storage_class), ("csidriver", name)):
            control_plane.kubectl(
                "delete", kind, obj_name, "--ignore-not-found", "--wait=false", check=False
            )
        unmount_and_remove(short)  # a tmpfs volume the provisioner did not delete
