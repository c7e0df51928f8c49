"""The container-runtime half of `make up`: routes, CNI, containerd, images, registry.

Composes the harness's containerd, cni, netsafety, images and registry modules with everything
detached and kept under ``<up dir>/runtime/``. `ensure` returns a JSON-able record that `stop`
reads back (also from a later process). If those modules are not available yet, `ensure` says
the runtime part is pending and records nothing.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

from harness.versions import load_versions

PRIVATE_LOGIN = ("demo", "demo-password")
"""The login of `make up`'s private registry (a local demo registry, never a real secret)."""

RUNTIME_MODULES = (
    "containerd",
    "cni",
    "netsafety",
    "registry",
    "mirrors",
    "images",
    "images.build",
)


def say(message: str) -> None:
    print(f">>> {message}", flush=True)


def _modules() -> dict[str, Any] | None:
    try:
        return {name: importlib.import_module(f"harness.{name}") for name in RUNTIME_MODULES}
    except ImportError as error:
        say(f"container runtime: pending ({error}); the control plane runs without it")
        return None


def _alive(record: dict[str, Any], mods: dict[str, Any]) -> bool:
    processes = importlib.import_module("harness.processes")
    base = Path(record["containerd_dir"])
    return bool(
        processes.is_running(record["containerd_pid"], binary=mods["containerd"].CONTAINERD)
        and mods["containerd"].cri_answers(base / "c.sock")
    )


def ensure(record: dict[str, Any] | None, *, directory: Path, holder: int) -> dict[str, Any] | None:
    """Start the runtime unless `record` describes one that is still running.

    The `unreachable` routes for the cluster ranges are held on behalf of process `holder` (a
    long-lived process of the `up` cluster), so they stay while the cluster runs.
    """
    mods = _modules()
    if mods is None:
        return None
    if record and _alive(record, mods):
        say(f"containerd already running: unix://{record['containerd_dir']}/c.sock")
        return record
    if record:
        say("containerd from the earlier `up` is gone; starting it again")
        stop(record)
    return _start(mods, directory=directory, holder=holder)


def _start(mods: dict[str, Any], *, directory: Path, holder: int) -> dict[str, Any]:
    versions = load_versions()
    base = directory / "runtime"
    logs = directory / "logs"
    record: dict[str, Any] = {
        "routes_held": [],
        "route_holder": holder,
        "containerd_dir": str(base / "containerd"),
    }
    try:
        for cidr in (versions.cluster_cidr, versions.service_cidr):
            if mods["netsafety"].hold_unreachable(cidr, holder=holder):
                record["routes_held"].append(cidr)
        network = mods["cni"].CniNetwork(
            conf_dir=base / "cni" / "conf", ipam_dir=base / "cni" / "ipam"
        )
        record["ip_forward_before"] = mods["cni"].read_ip_forward()
        mods["cni"].check_subnet_free(network)
        mods["cni"].write_conflist(network)
        record["cni"] = {"conf_dir": str(network.conf_dir), "ipam_dir": str(network.ipam_dir)}
        registry = mods["registry"].start_registry(
            base / "registry", log_path=logs / "registry.log", detached=True
        )
        record["registry_dir"] = str(registry.base_dir)
        record["registry"] = registry.host
        say(f"registry on {registry.url}")
        # A second registry that needs a login: the README's private-registry example.
        private = mods["registry"].start_registry(
            base / "registry-private",
            log_path=logs / "registry-private.log",
            detached=True,
            login=PRIVATE_LOGIN,
        )
        record["private_registry_dir"] = str(private.base_dir)
        record["private_registry"] = private.host
        config = mods["containerd"].ContainerdConfig(
            base_dir=base / "containerd",
            cni_conf_dir=network.conf_dir,
            plain_http_registries=(registry.host, private.host),
            mirror_registry=registry.host,
            log_path=logs / "containerd.log",
        )
        ctd = mods["containerd"].start_containerd(config, detached=True)
        record["containerd_pid"] = ctd.pid
        say(f"containerd on {ctd.endpoint} (log {ctd.log_path})")
        built = mods["images.build"].build_images()
        for recipe, image in built.items():
            ctd.import_image(image.tarball)
            pushed = registry.image(f"{recipe}:latest")
            mods["registry"].push_image(registry.host, image.layout, f"{recipe}:latest")
            say(f"image {', '.join(image.names)} imported; pushed as {pushed}")
        mods["registry"].push_image(
            private.host, built["busybox"].layout, "private/busybox:latest", login=PRIVATE_LOGIN
        )
        say(
            f"private registry on {private.url} (login {PRIVATE_LOGIN[0]} / "
            f"{PRIVATE_LOGIN[1]}): {private.host}/private/busybox:latest needs a pull secret"
        )
        stock = mods["mirrors"].push_stock(
            registry.host, {recipe: image.layout for recipe, image in built.items()}
        )
        say(
            f"registry mirrors: {', '.join(mods['mirrors'].MIRRORED_REGISTRIES)} are served by "
            f"{registry.host} only; pushed {', '.join(stock)}"
        )
    except BaseException:
        stop(record, mods=mods)
        raise
    return record


def stop(record: dict[str, Any] | None, *, mods: dict[str, Any] | None = None) -> None:
    """Undo what `ensure` recorded, newest first. Safe on partial records. (`mods`: the
    harness modules, imported when not given.)"""
    if not record:
        return
    mods = mods or _modules()
    if mods is None:
        return
    if "containerd_pid" in record or Path(record["containerd_dir"]).exists():
        mods["containerd"].stop_containerd(Path(record["containerd_dir"]))
    if "private_registry_dir" in record:
        mods["registry"].stop_registry(Path(record["private_registry_dir"]))
    if "registry_dir" in record:
        mods["registry"].stop_registry(Path(record["registry_dir"]))
    if "cni" in record:
        network = mods["cni"].CniNetwork(
            conf_dir=Path(record["cni"]["conf_dir"]), ipam_dir=Path(record["cni"]["ipam_dir"])
        )
        mods["cni"].remove_network(network, ip_forward_before=record.get("ip_forward_before"))
    for cidr in reversed(record.get("routes_held", [])):
        mods["netsafety"].release_unreachable(cidr, holder=record["route_holder"])
