"""Build etcd and the Kubernetes binaries from the Go module proxy, cached by version.

``python -m harness build [--peers]``. Binaries land in ``<cache>/bin/<kubernetes version>/`` and
``<cache>/bin/etcd-<etcd version>/``; next to each sits ``<name>.recipe``, the hash of everything
that went into it. A binary whose recipe file matches is not rebuilt, so a warm run only checks
files. Go's module and build caches live under ``<cache>/go/``.
"""

from __future__ import annotations

import argparse
import fcntl
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from harness.versions import Versions, cache_dir, load_versions

WRAPPERS = Path(__file__).with_name("k8s-build")
TAGS = "selinux,notest,grpcnotrace"  # what the Kubernetes release build uses
HEARTBEAT_SECONDS = 60.0
CONTROL_PLANE = ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl")
PEERS = ("kubelet", "kube-proxy")


@dataclass(frozen=True, kw_only=True)
class Target:
    name: str
    wrapper: str  # "kubernetes" or "etcd"
    package: str
    ldflags: str
    out_dir: Path


@dataclass(frozen=True, kw_only=True)
class Binaries:
    """Where the built binaries are."""

    kubernetes_dir: Path
    etcd_dir: Path

    def path(self, name: str) -> Path:
        return (self.etcd_dir if name == "etcd" else self.kubernetes_dir) / name


def binaries(versions: Versions | None = None) -> Binaries:
    v = versions or load_versions()
    root = cache_dir() / "bin"
    return Binaries(kubernetes_dir=root / v.kubernetes, etcd_dir=root / f"etcd-{v.etcd}")


def kubernetes_ldflags(version: str) -> str:
    major, minor = version.lstrip("v").split(".")[:2]
    values = {
        "gitVersion": version,
        "gitMajor": major,
        "gitMinor": minor,
        "gitTreeState": "clean",
        "buildDate": "1970-01-01T00:00:00Z",
    }
    flags = [
        f"-X {pkg}.{key}={value}"
        for pkg in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version")
        for key, value in values.items()
    ]
    return " ".join(["-s", "-w", *flags])


def targets(versions: Versions, *, peers: bool) -> list[Target]:
    where = binaries(versions)
    names = [*CONTROL_PLANE, *(PEERS if peers else ())]
    k8s = [
        Target(
            name=name,
            wrapper="kubernetes",
            package=f"k8s.io/kubernetes/cmd/{name}",
            ldflags=kubernetes_ldflags(versions.kubernetes),
            out_dir=where.kubernetes_dir,
        )
        for name in names
    ]
    etcd = Target(
        name="etcd",
        wrapper="etcd",
        package="go.etcd.io/etcd/server/v3",
        ldflags="-s -w",
        out_dir=where.etcd_dir,
    )
    return [etcd, *k8s]


def metrics_server_target(versions: Versions) -> Target:
    """metrics-server (for `make up`'s `kubectl top`), built only when asked for."""
    return Target(
        name="metrics-server",
        wrapper="metrics-server",
        package="sigs.k8s.io/metrics-server/cmd/metrics-server",
        ldflags="-s -w",
        out_dir=cache_dir() / "bin" / f"metrics-server-{versions.metrics_server}",
    )


def coredns_target(versions: Versions) -> Target:
    """CoreDNS (`make up`'s cluster DNS), built only when asked for. Its main package is the
    module root; the plugin list compiled in is the release's (core/plugin/zplugin.go)."""
    return Target(
        name="coredns",
        wrapper="coredns",
        package="github.com/coredns/coredns",
        ldflags="-s -w",
        out_dir=cache_dir() / "bin" / f"coredns-{versions.coredns}",
    )


def go_env() -> dict[str, str]:
    go_root = cache_dir() / "go"
    env = dict(os.environ)
    env.update(
        GOMODCACHE=str(go_root / "mod"),
        GOCACHE=str(go_root / "build"),
        GOFLAGS="-mod=mod",
        GOTOOLCHAIN="local",  # etcd asks for a newer patch toolchain; the machine's Go is enough
        CGO_ENABLED="0",
    )
    return env


def go(*args: str, cwd: Path | None = None) -> str:
    done = subprocess.run(
        ["go", *args], cwd=cwd, env=go_env(), check=True, capture_output=True, text=True
    )
    return done.stdout


def staging_modules(kubernetes_go_mod: str) -> list[str]:
    """The k8s.io modules that k8s.io/kubernetes replaces with its ./staging directories."""
    return sorted(set(re.findall(r"^\s*(k8s\.io/\S+)\s+=>\s+\./staging/", kubernetes_go_mod, re.M)))


def render_kubernetes_go_mod(versions: Versions, kubernetes_go_mod: str) -> str:
    replaces = "\n".join(
        f"\t{mod} => {mod} {versions.kubernetes_staging}"
        for mod in staging_modules(kubernetes_go_mod)
    )
    template = (WRAPPERS / "kubernetes.go.mod.in").read_text()
    return (
        template.replace("@KUBERNETES_VERSION@", versions.kubernetes)
        .replace("@STAGING_VERSION@", versions.kubernetes_staging)
        .replace("@STAGING_REPLACES@", replaces)
    )


def render_etcd_go_mod(versions: Versions) -> str:
    return (WRAPPERS / "etcd.go.mod.in").read_text().replace("@ETCD_VERSION@", versions.etcd)


def render_metrics_server_go_mod(versions: Versions) -> str:
    template = (WRAPPERS / "metrics-server.go.mod.in").read_text()
    return template.replace("@METRICS_SERVER_VERSION@", versions.metrics_server)


def render_coredns_go_mod(versions: Versions) -> str:
    template = (WRAPPERS / "coredns.go.mod.in").read_text()
    return template.replace("@COREDNS_VERSION@", versions.coredns)


def wrapper_go_mod(versions: Versions, wrapper: str) -> str:
    if wrapper == "coredns":
        return render_coredns_go_mod(versions)
    if wrapper == "etcd":
        return render_etcd_go_mod(versions)
    if wrapper == "metrics-server":
        return render_metrics_server_go_mod(versions)
    info = json.loads(go("mod", "download", "-json", f"k8s.io/kubernetes@{versions.kubernetes}"))
    return render_kubernetes_go_mod(versions, Path(info["GoMod"]).read_text())


def prepare_wrapper(versions: Versions, wrapper: str) -> tuple[Path, str]:
    """Write the wrapper module's go.mod into the cache; return its directory and text."""
    version = {
        "etcd": versions.etcd,
        "metrics-server": versions.metrics_server,
        "coredns": versions.coredns,
    }.get(wrapper, versions.kubernetes)
    directory = cache_dir() / "go" / "src" / f"{wrapper}-{version}"
    directory.mkdir(parents=True, exist_ok=True)
    text = wrapper_go_mod(versions, wrapper)
    (directory / "go.mod").write_text(text)
    return directory, text


def recipe(target: Target, versions: Versions, go_version: str) -> str:
    """Hash of everything that decides a binary, known before any Go command runs: the wrapper
    template, the pinned versions, the package, flags and the toolchain."""
    parts = [
        go_version,
        target.package,
        target.ldflags,
        TAGS,
        "CGO_ENABLED=0 -trimpath",
        f"{versions.kubernetes} {versions.kubernetes_staging} {versions.etcd}",
        (WRAPPERS / f"{target.wrapper}.go.mod.in").read_text(),
    ]
    if target.wrapper == "metrics-server":  # its own pin; the others' recipes stay as they were
        parts.append(versions.metrics_server)
    if target.wrapper == "coredns":
        parts.append(versions.coredns)
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()


def is_fresh(target: Target, recipe_hash: str) -> bool:
    binary = target.out_dir / target.name
    stamp = target.out_dir / f"{target.name}.recipe"
    return binary.is_file() and stamp.is_file() and stamp.read_text().strip() == recipe_hash


def duration(seconds: float) -> str:
    minutes, secs = divmod(round(seconds), 60)
    return f"{minutes}m{secs:02d}s" if minutes else f"{secs}s"


def say(message: str) -> None:
    print(f">>> {message}", flush=True)


def run_go_build(target: Target, workdir: Path, *, parallel: int | None) -> None:
    target.out_dir.mkdir(parents=True, exist_ok=True)
    partial = target.out_dir / f".{target.name}.partial"
    command = ["go", "build", "-trimpath", f"-tags={TAGS}", f"-ldflags={target.ldflags}"]
    if parallel:
        command.append(f"-p={parallel}")
    command += ["-o", str(partial), target.package]
    started = time.monotonic()
    with subprocess.Popen(command, cwd=workdir, env=go_env()) as proc:
        while True:
            try:
                proc.wait(timeout=HEARTBEAT_SECONDS)
                break
            except subprocess.TimeoutExpired:
                say(f"... still building {target.name} ({duration(time.monotonic() - started)})")
    if proc.returncode != 0:
        partial.unlink(missing_ok=True)
        raise SystemExit(f"building {target.name} failed (go build exit {proc.returncode})")
    partial.rename(target.out_dir / target.name)


@contextmanager
def build_lock() -> Iterator[None]:
    lock_path = cache_dir() / "bin" / ".build.lock"
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with lock_path.open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _ensure_addon(target: Target, version: str, setting: str, parallel: int | None) -> Path:
    """Build one on-demand binary (metrics-server, CoreDNS) unless it is fresh; its path."""
    if shutil.which("go") is None:
        raise SystemExit("`go` is not on PATH: the build needs the Go toolchain (1.26 or newer)")
    if not version:
        raise SystemExit(f"{setting} is not set in tests/harness/versions.env")
    versions = load_versions()
    go_version = go("env", "GOVERSION").strip()
    with build_lock():
        wanted = recipe(target, versions, go_version)
        if not is_fresh(target, wanted):
            workdir, _ = prepare_wrapper(versions, target.wrapper)
            say(f"building {target.name} {version} ({target.package}) ...")
            started = time.monotonic()
            run_go_build(target, workdir, parallel=parallel)
            (target.out_dir / f"{target.name}.recipe").write_text(wanted + "\n")
            say(f"built {target.name} in {duration(time.monotonic() - started)}")
    return target.out_dir / target.name


def ensure_metrics_server(*, parallel: int | None = None) -> Path:
    """Build metrics-server at METRICS_SERVER_VERSION unless it is fresh; return its path."""
    versions = load_versions()
    target = metrics_server_target(versions)
    return _ensure_addon(target, versions.metrics_server, "METRICS_SERVER_VERSION", parallel)


def ensure_coredns(*, parallel: int | None = None) -> Path:
    """Build CoreDNS at COREDNS_VERSION unless it is fresh; return its path."""
    versions = load_versions()
    target = coredns_target(versions)
    return _ensure_addon(target, versions.coredns, "COREDNS_VERSION", parallel)


def ensure_built(
    *, peers: bool = False, parallel: int | None = None, quiet: bool = False
) -> Binaries:
    """Build whatever is missing or stale; return where the binaries are."""
    if shutil.which("go") is None:
        raise SystemExit("`go` is not on PATH: the build needs the Go toolchain (1.26 or newer)")
    versions = load_versions()
    go_version = go("env", "GOVERSION").strip()
    wanted = targets(versions, peers=peers)
    # Binaries and stamps are renamed into place, so a fresh set can be read without waiting
    # for the lock another session's long build (an add-on, the e2e suite) may hold.
    if all(is_fresh(t, recipe(t, versions, go_version)) for t in wanted):
        if not quiet:
            say(f"binaries up to date ({', '.join(t.name for t in wanted)})")
        return binaries(versions)
    with build_lock():
        stale = [t for t in wanted if not is_fresh(t, recipe(t, versions, go_version))]
        if not stale:
            if not quiet:
                say(f"binaries up to date ({', '.join(t.name for t in wanted)})")
            return binaries(versions)
        workdirs: dict[str, Path] = {}
        total = time.monotonic()
        for target in stale:
            if target.wrapper not in workdirs:
                workdirs[target.wrapper], _ = prepare_wrapper(versions, target.wrapper)
            say(f"building {target.name} ({target.package}) ...")
            started = time.monotonic()
            run_go_build(target, workdirs[target.wrapper], parallel=parallel)
            stamp = target.out_dir / f"{target.name}.recipe"
            stamp.write_text(recipe(target, versions, go_version) + "\n")
            say(f"built {target.name} in {duration(time.monotonic() - started)}")
        say(f"all binaries built in {duration(time.monotonic() - total)}")
    return binaries(versions)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness build")
    parser.add_argument("--peers", action="store_true", help="also build kubelet and kube-proxy")
    parser.add_argument("-p", "--parallel", type=int, default=None, help="go build -p")
    args = parser.parse_args(argv)
    where = ensure_built(peers=args.peers, parallel=args.parallel)
    print(f"kubernetes binaries: {where.kubernetes_dir}", file=sys.stderr)
    print(f"etcd binary: {where.etcd_dir}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
