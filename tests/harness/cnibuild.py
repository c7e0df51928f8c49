"""Build the pod network's binaries from the Go module proxy, cached like the other binaries.

- flanneld and install-conf (github.com/flannel-io/flannel at FLANNEL_VERSION), as flannel's
  Makefile builds them: cgo on (the UDP backend's C proxy), linked static;
- flannel's CNI plugin (plugins/meta/flannel of github.com/containernetworking/plugins at
  FLANNEL_CNI_PLUGIN_VERSION; see versions.env for why not github.com/flannel-io/cni-plugin);
- the node's standard plugins bridge, host-local, portmap and loopback
  (github.com/containernetworking/plugins at CNI_PLUGINS_VERSION), static.

Each lands in ``<cache>/bin/<set>-<version>/`` with a ``.recipe`` stamp (the hash of the wrapper
template, the version, the flags and the toolchain); a fresh stamp means no work.
"""

from __future__ import annotations

import hashlib
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

from harness.build import WRAPPERS, build_lock, duration, go, go_env, say
from harness.versions import Versions, cache_dir, load_versions

STUB = WRAPPERS / "tencentvpc-stub"
STANDARD_PLUGINS = ("bridge", "host-local", "portmap", "loopback")
_PLUGIN_PACKAGES = {
    "bridge": "plugins/main/bridge",
    "host-local": "plugins/ipam/host-local",
    "portmap": "plugins/meta/portmap",
    "loopback": "plugins/main/loopback",
    "flannel": "plugins/meta/flannel",
}


@dataclass(frozen=True, kw_only=True)
class BinarySet:
    """Binaries built from one wrapper module."""

    wrapper: str  # k8s-build/<wrapper>.go.mod.in
    placeholder: str  # @FLANNEL_VERSION@ ...
    version: str
    binaries: dict[str, str]  # name -> package
    cgo: bool = False
    ldflags: str = "-s -w"

    @property
    def out_dir(self) -> Path:
        return cache_dir() / "bin" / f"{self.wrapper}-{self.version}"

    def path(self, name: str) -> Path:
        return self.out_dir / name


def flannel_set(v: Versions) -> BinarySet:
    module = "github.com/flannel-io/flannel"
    return BinarySet(
        wrapper="flannel",
        placeholder="@FLANNEL_VERSION@",
        version=v.flannel,
        binaries={"flanneld": module, "install-conf": f"{module}/cmd/install_conf"},
        cgo=True,
        ldflags=f'-s -w -X {module}/pkg/version.Version={v.flannel} -extldflags "-static"',
    )


def cni_plugins_set(v: Versions) -> BinarySet:
    module = "github.com/containernetworking/plugins"
    return BinarySet(
        wrapper="cni-plugins",
        placeholder="@CNI_PLUGINS_VERSION@",
        version=v.cni_plugins,
        binaries={n: f"{module}/{_PLUGIN_PACKAGES[n]}" for n in STANDARD_PLUGINS},
    )


def flannel_cni_set(v: Versions) -> BinarySet:
    module = "github.com/containernetworking/plugins"
    return BinarySet(
        wrapper="flannel-cni",
        placeholder="@FLANNEL_CNI_PLUGIN_VERSION@",
        version=v.flannel_cni_plugin,
        binaries={"flannel": f"{module}/{_PLUGIN_PACKAGES['flannel']}"},
    )


def _template(s: BinarySet) -> str:
    return (WRAPPERS / f"{s.wrapper}.go.mod.in").read_text()


def recipe(s: BinarySet, go_version: str) -> str:
    parts = [go_version, s.version, s.ldflags, f"cgo={s.cgo}", _template(s), *sorted(s.binaries)]
    if s.wrapper == "flannel":
        parts += [p.read_text() for p in sorted(STUB.rglob("*")) if p.is_file()]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()


def _fresh(s: BinarySet, wanted: str) -> bool:
    stamp = s.out_dir / ".recipe"
    return (
        stamp.is_file()
        and stamp.read_text().strip() == wanted
        and all(s.path(n).is_file() for n in s.binaries)
    )


def _build(s: BinarySet) -> None:
    import subprocess

    work = cache_dir() / "go" / "src" / f"{s.wrapper}-{s.version}"
    work.mkdir(parents=True, exist_ok=True)
    (work / "go.mod").write_text(_template(s).replace(s.placeholder, s.version))
    if s.wrapper == "flannel":
        shutil.rmtree(work / STUB.name, ignore_errors=True)
        shutil.copytree(STUB, work / STUB.name)
    env = go_env()
    tags = []
    if s.cgo:
        env["CGO_ENABLED"] = "1"
        tags = ["-tags=netgo,osusergo"]  # static glibc: no NSS lookups at run time
    s.out_dir.mkdir(parents=True, exist_ok=True)
    for name, package in s.binaries.items():
        partial = s.out_dir / f".{name}.partial"
        command = ["go", "build", "-trimpath", *tags, f"-ldflags={s.ldflags}", "-o", str(partial)]
        subprocess.run([*command, package], cwd=work, env=env, check=True)
        partial.rename(s.path(name))


def ensure(s: BinarySet) -> BinarySet:
    """Build the set unless its stamp is fresh; returns it."""
    if shutil.which("go") is None:
        raise SystemExit("`go` is not on PATH: the build needs the Go toolchain (1.26 or newer)")
    if not s.version:
        raise SystemExit(f"{s.placeholder.strip('@')} is not set in tests/harness/versions.env")
    go_version = go("env", "GOVERSION").strip()
    wanted = recipe(s, go_version)
    if _fresh(s, wanted):  # binaries and stamps are renamed into place: no lock to read them
        return s
    with build_lock():
        if not _fresh(s, wanted):
            say(f"building {', '.join(s.binaries)} {s.version} ...")
            started = time.monotonic()
            _build(s)
            (s.out_dir / ".recipe").write_text(wanted + "\n")
            say(f"built {', '.join(s.binaries)} in {duration(time.monotonic() - started)}")
    return s


def ensure_all() -> tuple[BinarySet, BinarySet, BinarySet]:
    """(flannel, its CNI plugin, the standard plugins), built when missing."""
    v = load_versions()
    return ensure(flannel_set(v)), ensure(flannel_cni_set(v)), ensure(cni_plugins_set(v))
