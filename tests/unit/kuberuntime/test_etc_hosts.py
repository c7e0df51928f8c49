"""The pod's kubelet-managed /etc/hosts: its exact bytes, when it is mounted, the hostname it
names (``hostname``/``subdomain``/``hostnameOverride``), and the file and mounts the runtime
manager gives each container."""

from __future__ import annotations

import stat
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import msgspec
import pytest

from nodeagent.config import Config
from nodeagent.kuberuntime import etchosts
from nodeagent.kuberuntime.dns import PodDNSError, pod_hostname
from nodeagent.kuberuntime.env import EnvInputs
from nodeagent.kuberuntime.manager import RuntimeManager
from nodeagent.kuberuntime.mounts import HostDevice, HostMount
from nodeagent.kuberuntime.podfiles import PodFiles
from nodeagent.kuberuntime.podsettings import PodRuntimeSettings, ResolvConf
from nodeagent.kuberuntime.results import CREATE_CONTAINER_CONFIG_ERROR, SyncResult
from nodeagent.kuberuntime.sandbox import build_sandbox_config
from nodeagent.pods.managers import runtime_settings
from nodeagent.podspec import Container, HostAlias, Pod
from nodeagent.testing.fake_apiserver import LoopClock
from nodeagent.testing.fake_runtime import FakeRuntime
from nodeagent.testing.pods import BUSYBOX, MemoryFiles, container, pod

ALIASES = (
    HostAlias(ip="10.1.2.3", hostnames=("foo", "bar")),
    HostAlias(ip="fd00::5", hostnames=("baz.example.com",)),
)
LOCALHOST = (
    b"127.0.0.1\tlocalhost\n"
    b"::1\tlocalhost ip6-localhost ip6-loopback\n"
    b"fe00::0\tip6-localnet\n"
    b"fe00::0\tip6-mcastprefix\n"
    b"fe00::1\tip6-allnodes\n"
    b"fe00::2\tip6-allrouters\n"
)
ROOT = "/var/lib/nodeagent"
SETTINGS = PodRuntimeSettings(
    node_name="node-a", root_dir=ROOT, cluster_domain="cluster.local", node_ips=("192.0.2.7",)
)


# --- content ----------------------------------------------------------------------------


def test_a_pod_network_pod_names_itself_on_each_of_its_ips() -> None:
    content = etchosts.managed_hosts_content(["10.88.0.4", "fd00::4"], "web-0", "", ())
    assert content == (
        b"# Kubernetes-managed hosts file.\n" + LOCALHOST + b"10.88.0.4\tweb-0\nfd00::4\tweb-0\n"
    )


def test_with_a_subdomain_the_fqdn_comes_first_then_the_short_name() -> None:
    content = etchosts.managed_hosts_content(["10.88.0.4"], "db-0", "db.shop.svc.cluster.local", ())
    assert content.endswith(b"\n10.88.0.4\tdb-0.db.shop.svc.cluster.local\tdb-0\n")


def test_host_aliases_follow_after_a_blank_line_one_line_per_ip() -> None:
    content = etchosts.managed_hosts_content(["10.88.0.4"], "web", "", ALIASES)
    assert content == (
        b"# Kubernetes-managed hosts file.\n"
        + LOCALHOST
        + b"10.88.0.4\tweb\n"
        + b"\n# Entries added by HostAliases.\n"
        + b"10.1.2.3\tfoo\tbar\n"
        + b"fd00::5\tbaz.example.com\n"
    )


def test_no_aliases_add_nothing() -> None:
    assert etchosts.host_alias_entries(()) == b""


def test_a_host_network_pod_gets_the_nodes_file_as_it_is_with_its_aliases() -> None:
    node = b"127.0.0.1 localhost\n192.0.2.7 node-a"  # no newline at the end: kept as it is
    content = etchosts.host_network_hosts_content(node, ALIASES[:1])
    assert content == (
        b"# Kubernetes-managed hosts file (host network).\n"
        b"127.0.0.1 localhost\n192.0.2.7 node-a"
        b"\n# Entries added by HostAliases.\n10.1.2.3\tfoo\tbar\n"
    )


# --- when it is mounted -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("host_network", "ips", "expected"),
    [
        (False, (), False),  # the sandbox has no IP yet
        (False, ("10.88.0.4",), True),
        (True, (), True),
        (True, ("192.0.2.7",), True),
    ],
)
def test_mounted_once_the_pod_has_an_ip_or_at_once_on_the_host_network(
    host_network: bool, ips: tuple[str, ...], expected: bool
) -> None:
    p = pod(hostNetwork=host_network)
    assert etchosts.should_mount_hosts_file(p, ips) is expected


def _container(*mount_paths: str) -> Container:
    mounts = [{"name": f"v{i}", "mountPath": path} for i, path in enumerate(mount_paths)]
    return pod(containers=[container("app", volumeMounts=mounts)]).spec.containers[0]


def test_a_container_mounting_its_own_etc_hosts_keeps_it() -> None:
    assert etchosts.mounts_own_hosts_file(_container("/data", "/etc/hosts"))
    assert not etchosts.mounts_own_hosts_file(_container("/etc/hosts-original"))
    assert not etchosts.mounts_own_hosts_file(_container())


def test_the_file_lives_in_the_pod_dir_and_is_bind_mounted_read_write() -> None:
    path = etchosts.hosts_file_path(SETTINGS, "uid-1")
    assert path == f"{ROOT}/pods/uid-1/etc-hosts"
    mount = etchosts.hosts_mount(path)
    assert (mount.container_path, mount.host_path, mount.readonly, mount.selinux_relabel) == (
        "/etc/hosts",
        path,
        False,
        False,
    )


# --- the names ----------------------------------------------------------------------------


def names(**spec: Any) -> tuple[str, str]:
    return pod_hostname(pod("web-0", namespace="shop", **spec), cluster_domain="cluster.local")


def test_hostname_and_subdomain() -> None:
    assert names() == ("web-0", "")
    assert names(hostname="db") == ("db", "")
    assert names(hostname="db", subdomain="dbs") == ("db", "dbs.shop.svc.cluster.local")


@pytest.mark.parametrize(
    "spec",
    [
        {"hostnameOverride": "override.example.host"},
        {"hostnameOverride": "override.example.host", "hostname": "db"},
        {"hostnameOverride": "override.example.host", "subdomain": "dbs"},
        {"hostnameOverride": "override.example.host", "hostname": "db", "subdomain": "dbs"},
    ],
)
def test_the_override_wins_over_hostname_and_subdomain_and_has_no_domain(
    spec: dict[str, str],
) -> None:
    assert names(**spec) == ("override.example.host", "")


def test_with_the_gate_off_the_override_is_ignored() -> None:
    p = pod("web-0", hostnameOverride="other", hostname="db")
    assert pod_hostname(p, cluster_domain="c", hostname_override=False) == ("db", "")


def test_the_sandbox_is_named_by_the_override_even_with_set_hostname_as_fqdn() -> None:
    p = pod("web-0", hostnameOverride="override-host", subdomain="s", setHostnameAsFQDN=True)
    config, _ = build_sandbox_config(p, settings=SETTINGS, attempt=0, host_dns=ResolvConf())
    assert config.hostname == "override-host"
    plain = pod("web-0", hostname="h", subdomain="s", setHostnameAsFQDN=True)
    config, _ = build_sandbox_config(plain, settings=SETTINGS, attempt=0, host_dns=ResolvConf())
    assert config.hostname == "h.s.default.svc.cluster.local"


def test_a_long_override_is_cut_to_63_characters_without_a_trailing_dot() -> None:
    override = "a" * 62 + ".b" + ".example.com"
    assert names(hostnameOverride=override) == ("a" * 62, "")


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        (
            {"hostnameOverride": "Not-RFC1123"},
            'pod HostnameOverride "Not-RFC1123" is not a valid DNS subdomain: a lowercase RFC 1123'
            " subdomain",
        ),
        ({"hostname": "a.b"}, 'pod Hostname "a.b" is not a valid DNS label: a lowercase RFC 1123'),
        ({"subdomain": "X"}, 'pod Subdomain "X" is not a valid DNS label: a lowercase RFC 1123'),
    ],
)
def test_names_the_apiserver_would_refuse_are_refused_with_the_kubelets_message(
    spec: dict[str, str], message: str
) -> None:
    with pytest.raises(PodDNSError) as raised:
        names(**spec)
    assert str(raised.value).startswith(message)


def test_host_aliases_are_checked_when_the_pod_is_decoded() -> None:
    with pytest.raises(msgspec.ValidationError, match=r"spec\.hostAliases\[0\]\.ip"):
        pod(hostAliases=[{"ip": "10.0.0.1\n1.2.3.4 evil", "hostnames": ["a"]}])
    with pytest.raises(msgspec.ValidationError, match=r"spec\.hostAliases\[1\]\.hostnames\[0\]"):
        pod(
            hostAliases=[
                {"ip": "10.0.0.1", "hostnames": ["a"]},
                {"ip": "10.0.0.2", "hostnames": ["b\tc"]},
            ]
        )


# --- the runtime manager writes it and mounts it ------------------------------------------


class OwnHostsVolume:
    """Each ``volumeMounts`` entry mounted from ``/srv/<volume name>``."""

    def container_devices(self, container: Container) -> Sequence[HostDevice]:
        return ()

    async def container_mounts(
        self, container: Container, env: Mapping[str, str]
    ) -> Sequence[HostMount]:
        return [HostMount(m.mount_path, f"/srv/{m.name}") for m in container.volume_mounts]


async def _sync(
    p: Pod, *, files: MemoryFiles, settings: PodRuntimeSettings = SETTINGS, rounds: int = 1
) -> tuple[FakeRuntime, SyncResult]:
    clock = LoopClock()
    fake = FakeRuntime(clock=clock)
    fake.add_image(BUSYBOX)
    manager = RuntimeManager(runtime=fake, images=fake, settings=settings, clock=clock, files=files)
    result = SyncResult()
    for _ in range(rounds):
        state = await manager.pod_state(p.uid)
        result = await manager.sync_pod(
            p,
            state,
            inputs=EnvInputs(host_ips=settings.node_ips),
            host_dns=ResolvConf(),
            volumes=OwnHostsVolume(),
        )
    return fake, result


async def _mounts(fake: FakeRuntime) -> dict[str, dict[str, str]]:
    """Container name -> container path -> host path."""
    out: dict[str, dict[str, str]] = {}
    for cid in fake.container_ids:
        status = (await fake.container_status(cid)).status
        out[status.metadata.name] = {m.container_path: m.host_path for m in status.mounts}
    return out


@pytest.mark.looptime
async def test_every_container_gets_the_file_unless_it_mounts_etc_hosts_itself() -> None:
    files = MemoryFiles()
    p = pod(
        "web",
        namespace="shop",
        uid="u-1",
        hostname="web-0",
        subdomain="web",
        hostAliases=[{"ip": "10.1.2.3", "hostnames": ["foo", "bar"]}],
        init_containers=[
            container("init", command=["true"]),
            container("sidecar", restartPolicy="Always"),
        ],
        containers=[
            container("app"),
            container("own", volumeMounts=[{"name": "h", "mountPath": "/etc/hosts"}]),
        ],
    )
    fake, _ = await _sync(p, files=files, rounds=1)
    path = f"{ROOT}/pods/u-1/etc-hosts"
    sandbox_ip = (await fake.pod_sandbox_status(fake.sandbox_ids[0])).status.network.ip
    assert files.files[path] == (
        b"# Kubernetes-managed hosts file.\n"
        + LOCALHOST
        + f"{sandbox_ip}\tweb-0.web.shop.svc.cluster.local\tweb-0\n".encode()
        + b"\n# Entries added by HostAliases.\n10.1.2.3\tfoo\tbar\n"
    )
    assert files.modes[path] == 0o644
    mounts = await _mounts(fake)
    assert mounts["init"]["/etc/hosts"] == path


@pytest.mark.looptime
async def test_sidecars_apps_and_own_mounts_after_the_init_container() -> None:
    files = MemoryFiles()
    p = pod(
        "web",
        uid="u-2",
        init_containers=[container("sidecar", restartPolicy="Always")],
        containers=[
            container("app"),
            container("own", volumeMounts=[{"name": "h", "mountPath": "/etc/hosts"}]),
        ],
    )
    fake, _ = await _sync(p, files=files, rounds=2)
    mounts = await _mounts(fake)
    path = f"{ROOT}/pods/u-2/etc-hosts"
    assert mounts["sidecar"]["/etc/hosts"] == path
    assert mounts["app"]["/etc/hosts"] == path
    assert mounts["own"]["/etc/hosts"] == "/srv/h"


@pytest.mark.looptime
async def test_a_host_network_pod_gets_the_nodes_hosts_file_and_its_aliases() -> None:
    files = MemoryFiles()
    node_hosts = "/host/etc/hosts"
    files.files[node_hosts] = b"127.0.0.1\tlocalhost\n192.0.2.7\tnode-a\n"
    settings = PodRuntimeSettings(
        node_name="node-a", root_dir=ROOT, node_ips=("192.0.2.7",), node_hosts_file=node_hosts
    )
    p = pod(
        "hn",
        uid="u-3",
        hostNetwork=True,
        hostAliases=[{"ip": "123.45.67.89", "hostnames": ["foo.com"]}],
    )
    fake, _ = await _sync(p, files=files, settings=settings)
    assert files.files[f"{ROOT}/pods/u-3/etc-hosts"] == (
        b"# Kubernetes-managed hosts file (host network).\n"
        b"127.0.0.1\tlocalhost\n192.0.2.7\tnode-a\n"
        b"\n# Entries added by HostAliases.\n123.45.67.89\tfoo.com\n"
    )
    assert (await _mounts(fake))["app"]["/etc/hosts"] == f"{ROOT}/pods/u-3/etc-hosts"


@pytest.mark.looptime
async def test_an_unreadable_node_hosts_file_fails_the_container_visibly() -> None:
    files = MemoryFiles()
    settings = PodRuntimeSettings(node_name="node-a", root_dir=ROOT, node_hosts_file="/nope")
    fake, result = await _sync(
        pod("hn", uid="u-4", hostNetwork=True), files=files, settings=settings
    )
    failure = result.failures["app"]
    assert failure.reason == CREATE_CONTAINER_CONFIG_ERROR
    assert failure.message == "open /nope: no such file or directory"
    assert fake.container_ids == []


@pytest.mark.looptime
async def test_the_override_is_the_hosts_entry() -> None:
    files = MemoryFiles()
    p = pod("web", uid="u-5", hostname="custom", subdomain="s", hostnameOverride="override-host")
    fake, _ = await _sync(p, files=files)
    ip = (await fake.pod_sandbox_status(fake.sandbox_ids[0])).status.network.ip
    assert files.files[f"{ROOT}/pods/u-5/etc-hosts"].endswith(f"\n{ip}\toverride-host\n".encode())
    assert fake.sandbox_config(fake.sandbox_ids[0]).hostname == "override-host"


@pytest.mark.parametrize(("gates", "expected"), [({}, True), ({"HostnameOverride": False}, False)])
def test_the_hostname_override_gate_reaches_the_runtime_settings(
    gates: dict[str, bool], expected: bool
) -> None:
    base = Config()
    cfg = msgspec.structs.replace(
        base, kubelet=msgspec.structs.replace(base.kubelet, feature_gates=gates)
    )
    settings = runtime_settings(cfg, node_name="n", memory_capacity=2**30)
    assert settings.hostname_override is expected


async def test_the_file_is_rewritten_in_place_so_running_containers_see_it(
    tmp_path: Path,
) -> None:
    files = PodFiles()
    path = tmp_path / "pods" / "uid" / "etc-hosts"
    await files.write_file(str(path), b"first, and longer\n", 0o644)
    inode = path.stat().st_ino
    path.chmod(0o600)
    await files.write_file(str(path), b"second\n", 0o644)
    assert path.read_bytes() == b"second\n"
    assert path.stat().st_ino == inode  # a bind mount of the old inode sees the new content
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
    assert await files.read_file(str(path)) == b"second\n"


async def test_a_symlink_in_its_place_is_not_followed(tmp_path: Path) -> None:
    target = tmp_path / "elsewhere"
    target.write_bytes(b"untouched\n")
    link = tmp_path / "etc-hosts"
    link.symlink_to(target)
    with pytest.raises(OSError):
        await PodFiles().write_file(str(link), b"x\n", 0o644)
    assert target.read_bytes() == b"untouched\n"
