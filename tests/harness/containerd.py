"""A private containerd for the tests and `make up`: own config, root, state and socket.

    ctd = start_containerd(ContainerdConfig(base_dir=Path("/tmp/x"), cni_conf_dir=...))
    ctd.endpoint          # unix:///tmp/x/c.sock, what a CRI client dials
    ctd.import_image(images["busybox"].tarball)
    ctd.stop()            # or stop_containerd(base_dir) from another process (`make down`)

Everything containerd writes lives under `base_dir`: `root/`, `state/` (including the CRI's
network namespace mounts: `netns_mounts_under_state_dir`), `tmp/`, `opt/`, the runc root and
the socket. Outside it, while containers exist: the shims' hashed sockets in /run/containerd/s,
the containers' cgroups (`/k8s.io/<id>` unless the CRI caller sets a parent) and libcni's result
cache in /var/lib/cni/results. A system containerd, if any, is never touched.

Stopping kills and deletes every task first (so the shims remove cgroups and sockets), stops
containerd, `runc delete`s containers a dead containerd left behind, kills any shim still serving
this socket, lazily unmounts everything under `base_dir`, removes it and the containers' cached
CNI results, and drops the shared dirs it leaves empty. It works from the pid file alone, so
`make down` and the sweep of killed test sessions use it too.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import re
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

from harness import mirrors, processes
from harness.images import PAUSE_IMAGE

CgroupDriver = Literal["cgroupfs", "systemd"]
CONTAINERD = shutil.which("containerd") or "/usr/bin/containerd"
CTR = shutil.which("ctr") or "/usr/bin/ctr"
RUNC = shutil.which("runc") or "/usr/sbin/runc"
MAX_SOCKET_PATH = 100  # sun_path is 108 bytes; containerd appends ".ttrpc"
START_TIMEOUT = 30.0
CAP_SYS_RESOURCE = 24
CGROUP_ROOT = Path("/sys/fs/cgroup")
CNI_CACHE = Path("/var/lib/cni")  # libcni's result cache; containerd 1.6 cannot move it


@dataclasses.dataclass(frozen=True, slots=True)
class ContainerdConfig:
    base_dir: Path
    cni_conf_dir: Path
    cni_bin_dir: Path = Path("/usr/lib/cni")
    cgroup_driver: CgroupDriver = "cgroupfs"  # "systemd" where systemd is PID 1 (VM tier)
    sandbox_image: str = PAUSE_IMAGE
    snapshotter: str = "overlayfs"
    max_container_log_line_size: int = 16384
    plain_http_registries: tuple[str, ...] = ()  # "127.0.0.1:5000", pulled over plain HTTP
    # "127.0.0.1:5000": docker.io, registry.k8s.io, ... (mirrors.MIRRORED_REGISTRIES) are
    # pulled from this local registry only (see harness/mirrors.py)
    mirror_registry: str | None = None
    # Without CAP_SYS_RESOURCE (this sandboxed host) runc cannot lower oom_score_adj (the CRI
    # asks -998 for sandboxes) and every RunPodSandbox fails; None = detect.
    restrict_oom_score_adj: bool | None = None
    log_path: Path | None = None  # default base_dir/containerd.log (removed by stop)
    # A CNI config template (`{{.PodCIDR}}`, ...): containerd writes
    # <cni_conf_dir>/10-containerd-net.conflist from it when the kubelet (here: the agent)
    # sends the node's pod CIDR with UpdateRuntimeConfig.
    cni_conf_template: Path | None = None
    # "127.0.0.1:PORT": serve Prometheus metrics at /v1/metrics there, with the gRPC server's
    # per-method counters and handling-time histograms (the benches count CRI calls with it)
    metrics_address: str | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class Containerd:
    """A running private containerd."""

    base_dir: Path
    pid: int
    snapshotter: str
    log_path: Path
    proc: processes.Proc | None = dataclasses.field(default=None, compare=False, repr=False)
    metrics_address: str | None = None  # ContainerdConfig.metrics_address

    @property
    def socket(self) -> Path:
        return self.base_dir / "c.sock"

    @property
    def endpoint(self) -> str:
        return f"unix://{self.socket}"

    @property
    def root(self) -> Path:
        return self.base_dir / "root"

    @property
    def state(self) -> Path:
        return self.base_dir / "state"

    @property
    def hosts_dir(self) -> Path:
        return self.base_dir / "certs.d"

    def ctr(
        self, *args: str, namespace: str = "k8s.io", check: bool = True, timeout: float = 60
    ) -> subprocess.CompletedProcess[str]:
        """Run `ctr` against this containerd; raises with ctr's stderr when `check` fails."""
        return _ctr(self.socket, namespace, args, check=check, timeout=timeout)

    def import_image(self, tarball: Path, *, namespace: str = "k8s.io") -> None:
        """Import an OCI tarball and unpack it for the CRI's snapshotter."""
        args = ("images", "import", "--snapshotter", self.snapshotter, str(tarball))
        self.ctr(*args, namespace=namespace)

    def remove_images_from(self, host: str, *, namespace: str = "k8s.io") -> list[str]:
        """Remove the image names (tags and digests) of registry `host` that pulls left, so
        a test leaves the session's containerd with the names it found (an image that also
        has other names keeps them and its content). Returns the names removed."""
        listed = self.ctr("images", "ls", "-q", namespace=namespace).stdout.split()
        names = [name for name in listed if name.startswith(f"{host}/")]
        if names:
            self.ctr("images", "rm", *names, namespace=namespace)
        return names

    def trust_plain_http(self, host: str) -> None:
        """Let pulls from `host` (e.g. 127.0.0.1:5000) use plain HTTP (read on every pull)."""
        write_hosts_toml(self.hosts_dir, host)

    def stop(self) -> None:
        stop_containerd(self.base_dir, proc=self.proc)


def has_capability(bit: int) -> bool:
    """Whether this process has capability number `bit` in its effective set."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("CapEff:"):
            return bool(int(line.split()[1], 16) >> bit & 1)
    return False


def write_hosts_toml(hosts_dir: Path, host: str) -> None:
    (hosts_dir / host).mkdir(parents=True, exist_ok=True)
    server = json.dumps(f"http://{host}")
    text = f'server = {server}\n\n[host.{server}]\n  capabilities = ["pull", "resolve"]\n'
    (hosts_dir / host / "hosts.toml").write_text(text)


def render_config(cfg: ContainerdConfig) -> str:
    """containerd 1.6 config (version 2). Strings are JSON-quoted, which TOML accepts."""
    base = cfg.base_dir
    q = json.dumps
    cri = '[plugins."io.containerd.grpc.v1.cri"'
    template = ""
    if cfg.cni_conf_template is not None:
        template = f"  conf_template = {q(str(cfg.cni_conf_template))}\n"
    restrict_oom = cfg.restrict_oom_score_adj
    if restrict_oom is None:
        restrict_oom = not has_capability(CAP_SYS_RESOURCE)
    metrics = ""
    if cfg.metrics_address is not None:
        metrics = f"\n[metrics]\n  address = {q(cfg.metrics_address)}\n  grpc_histogram = true\n"
    return f"""version = 2
root = {q(str(base / "root"))}
state = {q(str(base / "state"))}
temp = {q(str(base / "tmp"))}

[grpc]
  address = {q(str(base / "c.sock"))}

[ttrpc]
  address = {q(str(base / "c.sock.ttrpc"))}

[plugins."io.containerd.internal.v1.opt"]
  path = {q(str(base / "opt"))}

{cri}]
  sandbox_image = {q(cfg.sandbox_image)}
  max_container_log_line_size = {cfg.max_container_log_line_size}
  netns_mounts_under_state_dir = true
  restrict_oom_score_adj = {"true" if restrict_oom else "false"}
  enable_cdi = false

{cri}.containerd]
  snapshotter = {q(cfg.snapshotter)}
  default_runtime_name = "runc"

{cri}.containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"

{cri}.containerd.runtimes.runc.options]
  SystemdCgroup = {"true" if cfg.cgroup_driver == "systemd" else "false"}
  Root = {q(str(base / "state" / "runc"))}

{cri}.cni]
  bin_dir = {q(str(cfg.cni_bin_dir))}
  conf_dir = {q(str(cfg.cni_conf_dir))}
{template}
{cri}.registry]
  config_path = {q(str(base / "certs.d"))}
{metrics}"""


def _ctr(
    socket: Path, namespace: str, args: Sequence[str], *, check: bool, timeout: float
) -> subprocess.CompletedProcess[str]:
    cmd = [CTR, "--address", str(socket), "--namespace", namespace, *args]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
    if check and done.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({done.returncode}): {done.stderr.strip()}")
    return done


def cri_answers(socket: Path) -> bool:
    """True once the CRI service answers `Version` (an empty request) on `socket`."""
    import grpc

    with grpc.insecure_channel(f"unix://{socket}") as channel:
        version = channel.unary_unary("/runtime.v1.RuntimeService/Version")
        try:
            version(b"", timeout=1.0)
        except grpc.RpcError:
            return False
    return True


def start_containerd(
    cfg: ContainerdConfig, *, detached: bool = False, enter: Sequence[str] = ()
) -> Containerd:
    """Start containerd; return once its CRI service answers. Cleans up if that fails.

    `detached` (for `make up`) lets it outlive this process; otherwise it gets SIGTERM when
    this process dies. `enter` is a prefix that execs it elsewhere (`nsenter ... --`, a node of
    a multi-node cluster): the pid is then containerd's own.
    """
    base = cfg.base_dir
    socket = base / "c.sock"
    if len(str(socket)) > MAX_SOCKET_PATH:
        raise ValueError(f"socket path too long for a unix socket: {socket}")
    for sub in ("root", "state", "tmp", "opt", "certs.d"):
        (base / sub).mkdir(parents=True, exist_ok=True)
    for host in cfg.plain_http_registries:
        write_hosts_toml(base / "certs.d", host)
    if cfg.mirror_registry:
        mirrors.write_mirrors(base / "certs.d", cfg.mirror_registry)
    (base / "config.toml").write_text(render_config(cfg))
    log = cfg.log_path or base / "containerd.log"
    proc = processes.start(
        name="containerd",
        argv=[*enter, CONTAINERD, "--config", str(base / "config.toml"), "--log-level", "info"],
        log=log,
        detached=detached,
    )
    (base / "containerd.pid").write_text(str(proc.pid))
    try:
        processes.wait_for(
            lambda: socket.exists() and cri_answers(socket),
            what=f"containerd's CRI on {socket}",
            timeout=START_TIMEOUT,
            watch=[proc],
        )
    except BaseException:
        stop_containerd(base, proc=proc)
        raise
    return Containerd(
        base_dir=base,
        pid=proc.pid,
        snapshotter=cfg.snapshotter,
        log_path=log,
        proc=proc,
        metrics_address=cfg.metrics_address,
    )


def _kill_tasks(socket: Path) -> list[str]:
    """SIGKILL and delete every task in every namespace, so shims exit and clean up.

    Returns the ids of all containers (CRI sandboxes included) that existed.
    """
    listed = _ctr(socket, "default", ["namespaces", "ls", "-q"], check=False, timeout=10)
    ids: list[str] = []
    for ns in listed.stdout.split():
        ids += _ctr(socket, ns, ["containers", "ls", "-q"], check=False, timeout=10).stdout.split()
        tasks = _ctr(socket, ns, ["tasks", "ls", "-q"], check=False, timeout=10).stdout.split()
        for task in tasks:
            _ctr(socket, ns, ["tasks", "kill", "--all", "-s", "SIGKILL", task],
                 check=False, timeout=10)  # fmt: skip
        for task in tasks:
            _ctr(socket, ns, ["tasks", "delete", "--force", task], check=False, timeout=20)
    return ids


def _bundles(base: Path) -> list[tuple[str, str]]:
    """(namespace, id) of the task bundles still on disk: containers whose task was not deleted
    (containerd died first, e.g. its test session was killed)."""
    tasks = base / "state" / "io.containerd.runtime.v2.task"
    return [(b.parent.name, b.name) for b in tasks.glob("*/*") if b.is_dir()]


def _runc_delete(base: Path, bundles: list[tuple[str, str]]) -> None:
    """`runc delete --force` each leftover container: kills its processes, removes its cgroup."""
    for namespace, cid in bundles:
        # CRI containers use the runc root from the config; `ctr run` ones the default one
        for root in (base / "state" / "runc" / namespace, Path("/run/containerd/runc") / namespace):
            if (root / cid).exists():
                subprocess.run([RUNC, "--root", str(root), "delete", "--force", cid],
                               capture_output=True, check=False, timeout=30)  # fmt: skip


def _forget_cni_results(container_ids: list[str]) -> None:
    """Drop libcni's cached ADD results of these sandboxes (no CNI DEL ran for them)."""
    for cid in container_ids:
        for cached in CNI_CACHE.glob(f"results/*-{cid}-*"):
            cached.unlink(missing_ok=True)


def shims_of(socket: Path) -> list[int]:
    """Pids of containerd shims serving `socket` (`... -address <socket> ...`)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"-address" in argv and str(socket).encode() in argv and b"shim" in argv[0]:
            pids.append(int(entry.name))
    return pids


def mounts_under(base: Path) -> list[str]:
    """Mount points below `base` (from /proc/self/mountinfo), deepest first."""
    prefix = str(base.resolve()) + "/"
    points = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        raw = line.split()[4]
        point = re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), raw)
        if point.startswith(prefix):
            points.append(point)
    return sorted(points, key=lambda p: p.count("/"), reverse=True)


def unmount_and_remove(base: Path) -> None:
    """Lazily unmount everything below `base`, then delete it. Never deletes through a mount."""
    for point in mounts_under(base):
        subprocess.run(["umount", "--lazy", point], capture_output=True, check=False)
    left = mounts_under(base)
    if left:
        raise RuntimeError(f"still mounted under {base}, not removing it: {left}")
    shutil.rmtree(base, ignore_errors=True)


def stop_containerd(base_dir: Path, *, proc: processes.Proc | None = None) -> None:
    """Stop the containerd rooted at `base_dir` and remove every trace of it. Idempotent.

    `proc` is the handle from `start_containerd` in this process (so it is reaped); from
    another process (`make down`) the pid file is enough.
    """
    socket = base_dir / "c.sock"
    pid_file = base_dir / "containerd.pid"
    pid = int(pid_file.read_text()) if pid_file.exists() else None
    alive = pid is not None and processes.is_running(pid, binary=CONTAINERD)
    container_ids: list[str] = []
    try:
        if alive and socket.exists():
            container_ids = _kill_tasks(socket)
    finally:
        if proc is not None:
            proc.stop(timeout=10)
        elif pid is not None:
            processes.stop_pid(pid, binary=CONTAINERD, timeout=10)
        leftovers = _bundles(base_dir)
        _runc_delete(base_dir, leftovers)
        container_ids += [cid for _, cid in leftovers]
        for shim in shims_of(socket):
            processes.stop_pid(shim, binary=None, timeout=5)
        try:
            unmount_and_remove(base_dir)
        finally:
            _forget_cni_results(container_ids)
            _remove_empty_dirs()


def _remove_empty_dirs() -> None:
    """Drop the empty dirs shims, runc, libcni and `ctr` leave in shared places."""
    run = Path("/run/containerd")
    candidates = [*run.glob("runc/*"), run / "runc", run / "s", run / "fifo", run]
    # runc removes a container's cgroup but not the parent "/<namespace>" it made for it
    candidates += CGROUP_ROOT.glob("*/k8s.io")
    candidates += [CNI_CACHE / "results", CNI_CACHE]
    for empty in candidates:
        with contextlib.suppress(OSError):  # only if empty: another containerd may use it
            os.rmdir(empty)
