"""The test runtime works end to end: locally built images, a private containerd, CNI, a registry.

Driven through CRI with nodeagent's own client, as the agent will drive it.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import ipaddress
import json
import re
import signal
import subprocess
import uuid
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

import pytest
from harness import netsafety
from harness.fixtures_runtime import RuntimeEnv
from harness.images import BUSYBOX_IMAGE, PAUSE_IMAGE, BuiltImage, build_images, oci
from harness.registry import Registry, push_image

from cri_protos.runtime.v1 import api_pb2 as api
from nodeagent.kuberuntime import types as cri
from nodeagent.kuberuntime.remote import CriClient

pytestmark = pytest.mark.integration

# <RFC 3339 nano timestamp> <stream> <F(ull)|P(artial)> <text>: the CRI container log format
CRI_LOG_LINE = re.compile(
    r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{1,9}(Z|[+-]\d\d:\d\d) (stdout|stderr) ([FP]) (.*)$"
)
EXIT_TIMEOUT = 30.0


@dataclasses.dataclass
class Pod:
    client: CriClient
    sandbox_id: str
    config: cri.PodSandboxConfig
    log_dir: Path
    namespace_options: api.NamespaceOption | None = None

    async def run(self, name: str, command: Sequence[str], *, image: str = BUSYBOX_IMAGE) -> str:
        """Create and start a container; returns its id."""
        config = cri.ContainerConfig(
            metadata=cri.ContainerMetadata(name=name),
            image=cri.ImageSpec(image=image),
            command=list(command),
            log_path=f"{name}.log",
        )
        if self.namespace_options is not None:
            config.linux.security_context.namespace_options.CopyFrom(self.namespace_options)
        container_id = await self.client.create_container(self.sandbox_id, config, self.config)
        await self.client.start_container(container_id)
        return container_id

    async def wait_catching(self, container_id: str, argv0: str, signo: int) -> None:
        """Wait until the container's process runs `argv0` and has a handler for `signo`.

        Until it has exec'd, the process is `runc init`, whose Go runtime catches every signal;
        after, SigCgt (/proc/PID/status) shows only what the program installed itself.
        """
        response = await self.client.container_status(container_id, verbose=True)
        proc = Path(f"/proc/{json.loads(response.info['info'])['pid']}")
        loop = asyncio.get_running_loop()
        deadline = loop.time() + EXIT_TIMEOUT
        while True:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
            fields = dict(line.split(":", 1) for line in (proc / "status").read_text().splitlines())
            if argv[0] == argv0.encode() and int(fields["SigCgt"], 16) & (1 << (signo - 1)):
                return
            if loop.time() > deadline:
                raise TimeoutError(f"{container_id} ({argv}) has no handler for {signo} after 30s")
            await asyncio.sleep(0.01)

    async def wait_exited(self, container_id: str) -> cri.ContainerStatus:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + EXIT_TIMEOUT
        while True:
            status = (await self.client.container_status(container_id)).status
            if status.state == cri.CONTAINER_EXITED:
                return status
            if loop.time() > deadline:
                raise TimeoutError(f"container {container_id} still {status.state} after 30s")
            await asyncio.sleep(0.1)


@contextlib.asynccontextmanager
async def open_pod(
    runtime: RuntimeEnv, log_dir: Path, *, namespace_options: api.NamespaceOption | None = None
) -> AsyncIterator[Pod]:
    name = f"pod-{uuid.uuid4().hex[:8]}"
    config = cri.sandbox_config(
        name=name, namespace="default", uid=str(uuid.uuid4()), log_directory=str(log_dir)
    )
    if namespace_options is not None:
        config.linux.security_context.namespace_options.CopyFrom(namespace_options)
    async with CriClient.open(runtime.endpoint) as client:
        sandbox_id = await client.run_pod_sandbox(config)
        try:
            yield Pod(
                client=client,
                sandbox_id=sandbox_id,
                config=config,
                log_dir=log_dir,
                namespace_options=namespace_options,
            )
        finally:
            await client.stop_pod_sandbox(sandbox_id)
            await client.remove_pod_sandbox(sandbox_id)


@pytest.fixture
async def pod(containerd: RuntimeEnv, tmp_path: Path) -> AsyncIterator[Pod]:
    async with open_pod(containerd, tmp_path) as opened:
        yield opened


@pytest.fixture
async def shared_pid_pod(containerd: RuntimeEnv, tmp_path: Path) -> AsyncIterator[Pod]:
    shared_pid = api.NamespaceOption(pid=api.POD)
    async with open_pod(containerd, tmp_path, namespace_options=shared_pid) as opened:
        yield opened


def cri_log_messages(path: Path) -> list[tuple[str, str, str]]:
    """(stream, tag, text) of every line; fails on a line not in CRI log format."""
    parsed = []
    for line in path.read_text().splitlines():
        match = CRI_LOG_LINE.match(line)
        assert match, f"not a CRI log line: {line!r}"
        parsed.append((match.group(2), match.group(3), match.group(4)))
    return parsed


async def test_busybox_container_prints_to_its_cri_log(pod: Pod) -> None:
    container_id = await pod.run("hello", ["sh", "-c", "echo hello from busybox; echo oops >&2"])

    status = await pod.wait_exited(container_id)

    assert status.exit_code == 0
    assert Path(status.log_path) == pod.log_dir / "hello.log"
    # stdout and stderr are copied separately: their relative order is not kept
    assert sorted(cri_log_messages(Path(status.log_path))) == [
        ("stderr", "F", "oops"),
        ("stdout", "F", "hello from busybox"),
    ]


async def test_sandbox_gets_an_address_from_the_pod_subnet(
    pod: Pod, containerd: RuntimeEnv
) -> None:
    sandbox = (await pod.client.pod_sandbox_status(pod.sandbox_id)).status
    subnet = ipaddress.ip_network(containerd.pod_subnet)
    gateway = next(subnet.hosts())

    container_id = await pod.run("ip", ["sh", "-c", "ip -4 -o addr show eth0; ip route"])
    await pod.wait_exited(container_id)

    assert ipaddress.ip_address(sandbox.network.ip) in subnet
    printed = "\n".join(text for _, _, text in cri_log_messages(pod.log_dir / "ip.log"))
    assert f"inet {sandbox.network.ip}/{subnet.prefixlen}" in printed
    assert f"default via {gateway} dev eth0" in printed


async def test_pause_reaps_orphans_as_the_pods_pid_1(shared_pid_pod: Pod) -> None:
    # The subshell exits at once, orphaning `sleep 1`; its parent becomes the pod's PID 1 (pause),
    # which must reap it when it exits, or `ps` shows a zombie.
    script = "(sleep 1 &); sleep 2; ps -o pid,stat,args"
    container_id = await shared_pid_pod.run("orphans", ["sh", "-c", script])
    await shared_pid_pod.wait_exited(container_id)

    ps = [text for _, _, text in cri_log_messages(shared_pid_pod.log_dir / "orphans.log")]
    assert ps[0].split() == ["PID", "STAT", "COMMAND"]
    assert ps[1].split()[0] == "1" and ps[1].split()[2] == "/pause"
    assert not [line for line in ps[1:] if line.split()[1].startswith("Z")], ps


async def test_pause_exits_zero_on_sigterm(pod: Pod) -> None:
    container_id = await pod.run("pause", [], image=PAUSE_IMAGE)
    # StartContainer returns before the process has surely reached pause's sigaction; a SIGTERM
    # sent earlier finds runc init or the default action and ends it with 143 (seen in CI once).
    await pod.wait_catching(container_id, "/pause", signal.SIGTERM)
    loop = asyncio.get_running_loop()
    started = loop.time()

    await pod.client.stop_container(container_id, 20)  # SIGTERM; SIGKILL after 20 s

    status = (await pod.client.container_status(container_id)).status
    assert status.state == cri.CONTAINER_EXITED
    assert status.exit_code == 0  # 137 had it needed the SIGKILL
    assert loop.time() - started < 10


async def test_image_is_pulled_from_the_local_registry_over_cri(
    containerd: RuntimeEnv, registry: Registry, tmp_path: Path
) -> None:
    # An image nothing local has: its manifest, config and layer can only come from the registry.
    marker = uuid.uuid4().hex
    layout = oci.write_layout(
        tmp_path / "layout",
        entries=[oci.Entry(path="marker", kind="file", mode=0o644, data=marker.encode())],
        config=oci.ImageConfig(cmd=("/marker",)),
        names=["pulled"],
    )
    repository = f"pulled/{marker[:12]}"
    push_image(registry.host, layout.path, f"{repository}:v1")
    reference = registry.image(f"{repository}:v1")
    manifest = json.loads(oci.read_blob(layout.path, layout.manifest_digest))

    async with CriClient.open(containerd.endpoint) as client:
        image_ref = await client.pull_image(reference)
        image = (await client.image_status(reference)).image
        await client.remove_image(reference)

    assert image_ref == image.id == layout.config_digest
    assert image.repo_tags == [reference]
    assert image.repo_digests == [f"{registry.host}/{repository}@{layout.manifest_digest}"]
    fetched = [
        f"manifests/{layout.manifest_digest}",
        f"blobs/{layout.config_digest}",
        f"blobs/{manifest['layers'][0]['digest']}",
    ]
    log = registry.log_path.read_text()
    for path in fetched:
        assert f'"GET /v2/{repository}/{path} HTTP/1.1" 200' in log, path


async def test_local_images_are_known_to_the_cri_under_every_name(
    containerd: RuntimeEnv, images: dict[str, BuiltImage]
) -> None:
    names = [name for image in images.values() for name in image.names]
    assert {PAUSE_IMAGE, BUSYBOX_IMAGE, "registry.k8s.io/pause:3.10"} <= set(names)

    async with CriClient.open(containerd.endpoint) as client:
        found = {name: (await client.image_status(name)).image.id for name in names}

    expected = {name: image.config_digest for image in images.values() for name in image.names}
    assert found == expected


def test_cluster_ranges_are_unreachable_outside_the_bridge(containerd: RuntimeEnv) -> None:
    for cidr in (netsafety.POD_CIDR, netsafety.SERVICE_CIDR):
        outside = str(ipaddress.ip_network(cidr)[-2])  # not in any node's /24 in use here
        route = subprocess.run(
            ["ip", "route", "get", outside], capture_output=True, text=True, check=False
        )
        if route.returncode == 0:
            # a running `make up` routes its service range to a dead-end device of its own
            # (so the host's connections reach ClusterIPs): still nothing leaves the machine
            words = route.stdout.split()
            device = words[words.index("dev") + 1]
            assert device.startswith(netsafety.OUR_DEVICE_PREFIX), route.stdout
            assert "via" not in words, route.stdout
            continue
        assert "No route to host" in route.stderr, route.stderr  # the unreachable route


def test_a_second_hold_in_the_same_process_keeps_the_route_when_released(
    containerd: RuntimeEnv,
) -> None:
    # a test's private containerd holds the ranges inside the session fixture's hold
    with netsafety.unreachable_routes((netsafety.POD_CIDR,)) as held:
        assert held == [netsafety.POD_CIDR]
    assert netsafety.has_unreachable(netsafety.POD_CIDR)  # the fixture still needs it


def test_image_builds_are_reproducible(tmp_path: Path) -> None:
    first = build_images(cache_dir=tmp_path / "a", extra_names={"pause": ["example.org/p:1"]})
    second = build_images(cache_dir=tmp_path / "b", extra_names={"pause": ["example.org/p:1"]})

    for recipe in ("pause", "busybox"):
        assert first[recipe].manifest_digest == second[recipe].manifest_digest
        assert first[recipe].tarball.read_bytes() == second[recipe].tarball.read_bytes()
    assert first["pause"].names == (PAUSE_IMAGE, "example.org/p:1")
    again = build_images(cache_dir=tmp_path / "a", extra_names={"pause": ["example.org/p:1"]})
    assert all(image.cached for image in again.values())
