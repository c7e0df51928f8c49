"""Build the CSI components of ``make up``'s storage, cached like the other binaries.

``python -m harness csi-build``. Two kinds of binary land in ``<cache>/bin/csi-<name>-<version>/``:

- the kubernetes-csi sidecars (external-provisioner, -attacher, -resizer, -snapshotter), each
  from its Go module at the version pinned in ``versions.env`` (``CSI_*_VERSION``), all through
  one wrapper module in ``<cache>/go/src/csi-sidecars`` whose ``go.mod`` requires the four and
  repeats their ``replace`` lines (a dependency's replaces do not apply to the module that
  requires it, and the sidecars pin every k8s.io staging module that way), each staging module
  at ``CSI_STAGING_VERSION``. One build list means the dependencies they share (client-go, grpc,
  prometheus, ...) compile once: 4m03s for the four from an empty build cache, against 19m42
  with a module each, whose staging pins (v0.35.0 to v0.37.0) shared nothing;
- ``csi-hostpath``: the stand-in hostpath driver of this repository (tests/harness/csi-hostpath/,
  its own Go module): the plugin, the node registrar and the liveness probe in one binary, for
  the kubernetes-csi modules the proxy does not serve (see that directory's README).

Each binary has a ``.recipe`` stamp (the hash of what decides it) and is rebuilt only when that
changes; the build takes the harness's build lock, so concurrent builds wait.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import shutil
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from harness import build as hb
from harness.versions import Versions, cache_dir, load_versions

STANDIN_SOURCE = Path(__file__).with_name("csi-hostpath")
STANDIN_VERSION = "v0.3.0"  # the stand-in's own version: bump it with a behaviour change
WRAPPER_SCHEMA = "csi-wrapper-2"  # bump when `wrapper_go_mod` renders differently


@dataclass(frozen=True, kw_only=True)
class Sidecar:
    name: str  # the binary's name, also its image's last path element
    module: str
    setting: str  # the versions.env key
    version: str

    @property
    def package(self) -> str:
        return f"{self.module}/cmd/{self.name}"

    @property
    def out_dir(self) -> Path:
        return cache_dir() / "bin" / f"{self.name}-{self.version}"

    @property
    def path(self) -> Path:
        return self.out_dir / self.name


def sidecars(versions: Versions | None = None) -> list[Sidecar]:
    v = versions or load_versions()
    base = "github.com/kubernetes-csi"
    return [
        Sidecar(
            name="csi-provisioner",
            module=f"{base}/external-provisioner/v6",
            setting="CSI_PROVISIONER_VERSION",
            version=v.csi_provisioner,
        ),
        Sidecar(
            name="csi-attacher",
            module=f"{base}/external-attacher/v4",
            setting="CSI_ATTACHER_VERSION",
            version=v.csi_attacher,
        ),
        Sidecar(
            name="csi-resizer",
            module=f"{base}/external-resizer/v2",
            setting="CSI_RESIZER_VERSION",
            version=v.csi_resizer,
        ),
        Sidecar(
            name="csi-snapshotter",
            module=f"{base}/external-snapshotter/v8",
            setting="CSI_SNAPSHOTTER_VERSION",
            version=v.csi_snapshotter,
        ),
    ]


def version_replaces(upstream_go_mod: str) -> list[str]:
    """The ``replace`` lines of a go.mod that point at a module version (``a => b v1``), in
    either form (single line or block); replaces by a local path (``=> ./client``) are left
    out: they name files of the upstream's repository, which a module download lacks."""
    lines: list[str] = []
    in_block = False
    for raw in upstream_go_mod.splitlines():
        line = raw.split("//", 1)[0].strip()
        if in_block:
            if line == ")":
                in_block = False
                continue
            body = line
        elif line.startswith("replace ("):
            in_block = True
            continue
        elif line.startswith("replace "):
            body = line.removeprefix("replace ").strip()
        else:
            continue
        match = re.fullmatch(r"(\S+(?:\s+\S+)?)\s*=>\s*(\S+)\s+(v\S+)", body)
        if match:
            lines.append(f"{match.group(1)} => {match.group(2)} {match.group(3)}")
    return lines


def version_key(version: str) -> tuple[int, ...]:
    """``v0.37.0`` -> (0, 37, 0); a pre-release or build suffix is ignored."""
    core = version.lstrip("v").split("-", 1)[0].split("+", 1)[0]
    return tuple(int(part) for part in core.split("."))


def staging_pins(replaces: Sequence[str]) -> set[str]:
    """The k8s.io modules a go.mod pins to a version of themselves (``k8s.io/api =>
    k8s.io/api v0.35.0``): the Kubernetes staging modules."""
    pinned = set()
    for line in replaces:
        old, _, new = line.partition(" => ")
        if old.startswith("k8s.io/") and new.split()[0] == old:
            pinned.add(old)
    return pinned


def wrapper_go_mod(items: Sequence[Sidecar], upstreams: Sequence[str], staging: str) -> str:
    """One module that requires every sidecar. Each staging module any of them pins is pinned
    to ``staging``; their other version replaces are repeated. Raises ``SystemExit`` when two
    upstreams replace one module differently, or one asks for a staging module newer than
    ``staging`` (building it against older APIs could fail or change behaviour)."""
    per_upstream = [version_replaces(text) for text in upstreams]
    staged = set().union(*(staging_pins(r) for r in per_upstream))
    others: dict[str, tuple[str, str]] = {}
    for sidecar, replaces, text in zip(items, per_upstream, upstreams, strict=True):
        asked = re.findall(r"^\s*(?:require\s+)?(k8s\.io/\S+)\s+(v\S+)", text, re.M)
        asked += [(line.split()[0], line.split()[-1]) for line in replaces]
        for module, version in asked:
            if module in staged and version_key(version) > version_key(staging):
                raise SystemExit(
                    f"{sidecar.name} {sidecar.version} asks for {module} {version}, newer than"
                    f" CSI_STAGING_VERSION={staging} in tests/harness/versions.env: raise it"
                )
        for line in replaces:
            old, _, new = line.partition(" => ")
            if old in staged:
                continue
            seen = others.setdefault(old, (new, sidecar.name))
            if seen[0] != new:
                raise SystemExit(
                    f"{seen[1]} replaces {old} with {seen[0]} but {sidecar.name} with {new}:"
                    " one wrapper module cannot hold both"
                )
    requires = "\n".join(f"\t{s.module} {s.version}" for s in items)
    lines = [f"replace {m} => {m} {staging}" for m in sorted(staged)]
    lines += [f"replace {old} => {new}" for old, (new, _) in others.items()]
    names = ", ".join(s.setting for s in items)
    return (
        "// Wrapper module that builds the CSI sidecars from the Go module proxy.\n"
        f"// Written by tests/harness/csi_build.py with {names} and CSI_STAGING_VERSION.\n"
        "module nodeagent.test/csi-sidecars-build\n\n"
        "go 1.26.0\n\n"
        f"require (\n{requires}\n)\n\n" + "\n".join(lines) + "\n"
    )


def ldflags(version: str) -> str:
    """The sidecars' Makefiles stamp ``main.version``; they print it at start."""
    return f"-s -w -X main.version={version}"


def sidecar_recipe(sidecar: Sidecar, go_version: str, versions: Versions) -> str:
    """What decides a sidecar's binary: its own version and, through the shared build list,
    every other sidecar's and the staging version."""
    parts = [go_version, sidecar.package, sidecar.version, ldflags(sidecar.version)]
    parts += [f"{s.module}@{s.version}" for s in sidecars(versions)]
    parts += [versions.csi_staging, hb.TAGS, "CGO_ENABLED=0 -trimpath", WRAPPER_SCHEMA]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()


def standin_dir() -> Path:
    return cache_dir() / "bin" / f"csi-hostpath-{STANDIN_VERSION}"


def standin_files() -> list[Path]:
    return sorted(
        p for p in STANDIN_SOURCE.iterdir() if p.suffix == ".go" or p.name in {"go.mod", "go.sum"}
    )


def standin_recipe(go_version: str) -> str:
    parts = [go_version, STANDIN_VERSION, "CGO_ENABLED=0 -trimpath"]
    parts += [f"{p.name}\n{p.read_text()}" for p in standin_files()]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()


def _fresh(binary: Path, wanted: str) -> bool:
    stamp = binary.with_name(f"{binary.name}.recipe")
    return binary.is_file() and stamp.is_file() and stamp.read_text().strip() == wanted


def _stamp(binary: Path, recipe: str) -> None:
    """Write the binary's recipe stamp whole (a reader never sees half of one)."""
    partial = binary.with_name(f".{binary.name}.recipe.partial")
    partial.write_text(recipe + "\n")
    partial.rename(binary.with_name(f"{binary.name}.recipe"))


def _prepare_wrapper(versions: Versions) -> Path:
    items = sidecars(versions)
    upstreams = []
    for sidecar in items:
        info = json.loads(hb.go("mod", "download", "-json", f"{sidecar.module}@{sidecar.version}"))
        upstreams.append(Path(info["GoMod"]).read_text())
    workdir = cache_dir() / "go" / "src" / "csi-sidecars"
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / "go.mod").write_text(wrapper_go_mod(items, upstreams, versions.csi_staging))
    return workdir


def _build_sidecar(sidecar: Sidecar, workdir: Path, parallel: int | None) -> None:
    target = hb.Target(
        name=sidecar.name,
        wrapper="csi-sidecars",
        package=sidecar.package,
        ldflags=ldflags(sidecar.version),
        out_dir=sidecar.out_dir,
    )
    hb.run_go_build(target, workdir, parallel=parallel)


def _build_standin(parallel: int | None) -> None:
    target = hb.Target(
        name="csi-hostpath",
        wrapper="csi-hostpath",
        package=".",
        ldflags=f"-s -w -X main.version={STANDIN_VERSION}",
        out_dir=standin_dir(),
    )
    hb.run_go_build(target, STANDIN_SOURCE, parallel=parallel)


def ensure_csi(*, parallel: int | None = None, quiet: bool = False) -> dict[str, Path]:
    """Build whatever is missing or stale; returns each binary's path by name
    (``csi-provisioner``, ``csi-attacher``, ``csi-resizer``, ``csi-snapshotter``,
    ``csi-hostpath``)."""
    if shutil.which("go") is None:
        raise SystemExit("`go` is not on PATH: the build needs the Go toolchain (1.26 or newer)")
    versions = load_versions()
    go_version = hb.go("env", "GOVERSION").strip()
    standin = standin_dir() / "csi-hostpath"
    wanted_all = {s.path: sidecar_recipe(s, go_version, versions) for s in sidecars(versions)}
    wanted_all[standin] = standin_recipe(go_version)
    if all(_fresh(path, recipe) for path, recipe in wanted_all.items()):
        # binaries and stamps are renamed into place: a fresh set needs no lock (another
        # session's long build may hold it)
        paths = {path.name: path for path in wanted_all}
        if not quiet:
            hb.say("CSI binaries up to date: " + ", ".join(paths))
        return paths
    paths = {}
    with hb.build_lock():
        for setting, value in [(s.setting, s.version) for s in sidecars(versions)] + [
            ("CSI_STAGING_VERSION", versions.csi_staging)
        ]:
            if not value:
                raise SystemExit(f"{setting} is not set in tests/harness/versions.env")
        workdir: Path | None = None
        for sidecar in sidecars(versions):
            wanted = sidecar_recipe(sidecar, go_version, versions)
            if not _fresh(sidecar.path, wanted):
                workdir = workdir or _prepare_wrapper(versions)
                hb.say(f"building {sidecar.name} {sidecar.version} ({sidecar.package}) ...")
                started = time.monotonic()
                _build_sidecar(sidecar, workdir, parallel)
                _stamp(sidecar.path, wanted)
                hb.say(f"built {sidecar.name} in {hb.duration(time.monotonic() - started)}")
            paths[sidecar.name] = sidecar.path
        wanted = standin_recipe(go_version)
        if not _fresh(standin, wanted):
            hb.say(f"building csi-hostpath {STANDIN_VERSION} (tests/harness/csi-hostpath) ...")
            started = time.monotonic()
            _build_standin(parallel)
            _stamp(standin, wanted)
            hb.say(f"built csi-hostpath in {hb.duration(time.monotonic() - started)}")
        paths["csi-hostpath"] = standin
    if not quiet:
        hb.say("CSI binaries up to date: " + ", ".join(f"{n} {p}" for n, p in paths.items()))
    return paths


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness csi-build")
    parser.add_argument("-p", "--parallel", type=int, default=None, help="go build -p")
    args = parser.parse_args(argv)
    ensure_csi(parallel=args.parallel)
    return 0
