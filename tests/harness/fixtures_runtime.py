"""Pytest fixtures for the container runtime side (load with ``pytest_plugins`` or ``-p``).

- ``images``: the locally built OCI images (pause, busybox), from the cache when warm.
- ``extra_image_names``: more names for them; override it in a conftest to add names.
- ``registry``: a running local registry (127.0.0.1, plain HTTP) with the images pushed as
  ``<host>/pause:latest`` and ``<host>/busybox:latest``, and under the stock names
  (``mirrors.STOCK_NAMES``: ``docker.io/library/busybox:latest``, ``registry.k8s.io/pause:3.10.2``,
  ...); ``registry.host`` is ``127.0.0.1:PORT``.
- ``containerd``: a private containerd with the CRI on, a CNI bridge network, the
  `unreachable` routes for the cluster ranges, the images imported into ``k8s.io``, pulls from
  ``registry`` allowed over plain HTTP and the stock registries mirrored to it (``busybox`` pulls
  from ``registry``, never the internet); ``.endpoint``, ``.ctr(*args)``, ``.pod_subnet``.

All are session-scoped (per xdist worker). Each session (each worker) leases a bridge and /24 of
its own (``cni.leased_network``), never ``make up``'s ``na-cni0`` nor another checkout's. When a
test that used them fails, the tails of the containerd and registry logs are added to its report.
"""

from __future__ import annotations

import dataclasses
import shutil
import subprocess
import tempfile
import time
from collections.abc import Generator, Iterator, Mapping, Sequence
from pathlib import Path

import pytest
from harness import cni, netsafety
from harness.containerd import (
    CONTAINERD,
    Containerd,
    ContainerdConfig,
    start_containerd,
    stop_containerd,
)
from harness.images import BuiltImage, build_images
from harness.mirrors import push_stock
from harness.processes import is_running, tail
from harness.registry import REGISTRY, Registry, push_image, start_registry

LOG_TAIL_LINES = 40
STALE_AFTER = 60.0
DEFAULT_EXTRA_NAMES: Mapping[str, Sequence[str]] = {
    "pause": ("registry.k8s.io/pause:3.10",),
    "busybox": ("docker.io/library/busybox:1.36",),
}


@dataclasses.dataclass(frozen=True, slots=True)
class RuntimeEnv:
    """The `containerd` fixture: a running private containerd and its pod network."""

    containerd: Containerd
    network: cni.CniNetwork
    registry: Registry

    @property
    def endpoint(self) -> str:
        return self.containerd.endpoint

    @property
    def socket(self) -> Path:
        return self.containerd.socket

    @property
    def log_path(self) -> Path:
        return self.containerd.log_path

    @property
    def pod_subnet(self) -> str:
        return self.network.subnet

    def ctr(self, *args: str, namespace: str = "k8s.io") -> subprocess.CompletedProcess[str]:
        return self.containerd.ctr(*args, namespace=namespace)


def sweep_stale_sessions(tmp: Path | None = None) -> None:
    """Clean what sessions killed without teardown (SIGKILL) left: mounts, dirs, shims.

    A session's dirs are `na-ctd-*` / `na-reg-*`; they are stale when older than a minute and
    their containerd / registry is no longer running.
    """
    tmp = tmp or Path(tempfile.gettempdir())
    now = time.time()
    for kind, pid_file, binary in (
        ("na-ctd-", "c/containerd.pid", CONTAINERD),
        ("na-reg-", "registry.pid", REGISTRY),
    ):
        for old in tmp.glob(f"{kind}*"):
            pids = old / pid_file
            if now - old.stat().st_mtime < STALE_AFTER or (
                pids.exists() and is_running(int(pids.read_text() or 0), binary=binary)
            ):
                continue
            if kind == "na-ctd-":
                stop_containerd(old / "c")
            shutil.rmtree(old, ignore_errors=True)


@pytest.fixture(scope="session")
def extra_image_names() -> Mapping[str, Sequence[str]]:
    return DEFAULT_EXTRA_NAMES


@pytest.fixture(scope="session")
def images(extra_image_names: Mapping[str, Sequence[str]]) -> dict[str, BuiltImage]:
    return build_images(extra_names=extra_image_names)


@pytest.fixture(scope="session")
def registry(
    images: dict[str, BuiltImage], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Registry]:
    sweep_stale_sessions()
    logs = tmp_path_factory.mktemp("registry-logs")
    reg = start_registry(Path(tempfile.mkdtemp(prefix="na-reg-")), log_path=logs / "registry.log")
    try:
        for recipe, image in images.items():
            push_image(reg.host, image.layout, f"{recipe}:latest")
        push_stock(reg.host, {recipe: image.layout for recipe, image in images.items()})
        yield reg
    finally:
        reg.stop()


@pytest.fixture(scope="session")
def containerd(
    images: dict[str, BuiltImage],
    registry: Registry,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[RuntimeEnv]:
    logs = tmp_path_factory.mktemp("containerd-logs")
    base = Path(tempfile.mkdtemp(prefix="na-ctd-"))  # short: the socket path must fit
    ip_forward_before = cni.read_ip_forward()
    try:
        with (
            cni.leased_network(base) as net,
            netsafety.unreachable_routes((netsafety.POD_CIDR, netsafety.SERVICE_CIDR)),
        ):
            cni.check_subnet_free(net)
            cni.write_conflist(net)
            config = ContainerdConfig(
                base_dir=base / "c",
                cni_conf_dir=net.conf_dir,
                plain_http_registries=(registry.host,),
                mirror_registry=registry.host,
                log_path=logs / "containerd.log",
            )
            ctd = start_containerd(config)
            try:
                for image in images.values():
                    ctd.import_image(image.tarball)
                yield RuntimeEnv(containerd=ctd, network=net, registry=registry)
            finally:
                ctd.stop()
                cni.remove_network(net, ip_forward_before=ip_forward_before)
    finally:
        shutil.rmtree(base, ignore_errors=True)


def _log_tails(funcargs: Mapping[str, object]) -> list[tuple[str, str]]:
    sections = []
    runtime = funcargs.get("containerd")
    if isinstance(runtime, RuntimeEnv):
        text = tail(runtime.log_path, LOG_TAIL_LINES)
        sections.append((f"containerd log ({runtime.log_path})", text))
    reg = funcargs.get("registry") or getattr(runtime, "registry", None)
    if isinstance(reg, Registry):
        sections.append((f"registry log ({reg.log_path})", tail(reg.log_path, LOG_TAIL_LINES)))
    return sections


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    if report.failed:
        report.sections.extend(_log_tails(getattr(item, "funcargs", {})))
    del call
    return report
