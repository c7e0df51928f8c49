"""Build the CSI components of ``make up``'s storage, cached like the other binaries.

``python -m harness csi-build``. Two kinds of binary land in ``<cache>/bin/csi-<name>-<version>/``:

- the kubernetes-csi sidecars (external-provisioner, -attacher, -resizer, -snapshotter), each
  from its Go module at the version pinned in ``versions.env`` (``CSI_*_VERSION``), through a
  wrapper module in ``<cache>/go/src/csi-<name>-<version>`` whose ``go.mod`` requires it and
  repeats its own ``replace`` lines (a dependency's replaces do not apply to the module that
  requires it, and the sidecars pin every k8s.io staging module that way);
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
STANDIN_VERSION = "v0.2.0"  # the stand-in's own version: bump it with a behaviour change
WRAPPER_SCHEMA = "csi-wrapper-1"  # bump when `wrapper_go_mod` renders differently


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


def wrapper_go_mod(sidecar: Sidecar, upstream_go_mod: str) -> str:
    replaces = "\n".join(f"replace {r}" for r in version_replaces(upstream_go_mod))
    return (
        f"// Wrapper module that builds {sidecar.name} from the Go module proxy.\n"
        f"// Written by tests/harness/csi_build.py with {sidecar.setting}.\n"
        f"module nodeagent.test/{sidecar.name}-build\n\n"
        "go 1.26.0\n\n"
        f"require {sidecar.module} {sidecar.version}\n\n"
        f"{replaces}\n"
    )


def ldflags(version: str) -> str:
    """The sidecars' Makefiles stamp ``main.version``; they print it at start."""
    return f"-s -w -X main.version={version}"


def sidecar_recipe(sidecar: Sidecar, go_version: str) -> str:
    parts = [go_version, sidecar.package, sidecar.version, ldflags(sidecar.version)]
    parts += [hb.TAGS, "CGO_ENABLED=0 -trimpath", WRAPPER_SCHEMA]
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


def _build_sidecar(sidecar: Sidecar, parallel: int | None) -> None:
    info = json.loads(hb.go("mod", "download", "-json", f"{sidecar.module}@{sidecar.version}"))
    upstream = Path(info["GoMod"]).read_text()
    workdir = cache_dir() / "go" / "src" / f"{sidecar.name}-{sidecar.version}"
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / "go.mod").write_text(wrapper_go_mod(sidecar, upstream))
    target = hb.Target(
        name=sidecar.name,
        wrapper=sidecar.name,
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
    wanted_all = {s.path: sidecar_recipe(s, go_version) for s in sidecars(versions)}
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
        for sidecar in sidecars(versions):
            if not sidecar.version:
                raise SystemExit(f"{sidecar.setting} is not set in tests/harness/versions.env")
            wanted = sidecar_recipe(sidecar, go_version)
            if not _fresh(sidecar.path, wanted):
                hb.say(f"building {sidecar.name} {sidecar.version} ({sidecar.package}) ...")
                started = time.monotonic()
                _build_sidecar(sidecar, parallel)
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
