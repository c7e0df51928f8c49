"""Build the Kubernetes e2e suite from the Go module proxy, cached by version.

``python -m conformance build``. Three binaries land in ``<cache>/bin/e2e-<KUBERNETES_VERSION>/``:

- ``e2e.test``: ``go test -c k8s.io/kubernetes/test/e2e``;
- ``ginkgo``: the CLI at the version k8s.io/kubernetes's go.mod requires (the suite and the CLI
  must agree, or ginkgo refuses to run it in parallel);
- ``agnhost``: ``k8s.io/kubernetes/test/images/agnhost`` (static, CGO_ENABLED=0), for the agnhost
  image the specs run;
- ``nc``: ``tests/conformance/nc`` (this repository's, standard library only), the agnhost image's
  netcat (busybox's has no -v, -t or -u).

The wrapper module is the one `harness.build` renders for the Kubernetes binaries (same go.mod,
same staging pins) in its own directory ``<cache>/go/src/e2e-<version>``, because the test
dependencies add to its go.sum; the Go module and build caches are the harness's
(``<cache>/go/{mod,build}``), so a warm build only checks files. Each binary has a ``.recipe``
stamp like the harness's binaries.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from harness import build as hb
from harness.versions import Versions, cache_dir, load_versions

GINKGO_MODULE = "github.com/onsi/ginkgo/v2"
NC_SOURCE = Path(__file__).with_name("nc")


@dataclass(frozen=True, kw_only=True)
class Suite:
    """Where the built suite is."""

    directory: Path

    @property
    def e2e_test(self) -> Path:
        return self.directory / "e2e.test"

    @property
    def ginkgo(self) -> Path:
        return self.directory / "ginkgo"

    @property
    def agnhost(self) -> Path:
        return self.directory / "agnhost"

    @property
    def nc(self) -> Path:
        return self.directory / "nc"


@dataclass(frozen=True, kw_only=True)
class Step:
    name: str
    argv: tuple[str, ...]  # after `go`, before `-o <out> <package>`
    package: str
    source: Path | None = None  # a module of this repository (else the e2e wrapper module)


def suite_dir(versions: Versions) -> Suite:
    return Suite(directory=cache_dir() / "bin" / f"e2e-{versions.kubernetes}")


def module_source(versions: Versions) -> Path:
    """The k8s.io/kubernetes module's files (downloaded into the module cache if needed)."""
    root = cache_dir() / "go" / "mod" / "k8s.io" / f"kubernetes@{versions.kubernetes}"
    if not root.is_dir():
        hb.go("mod", "download", f"k8s.io/kubernetes@{versions.kubernetes}")
    return root


def steps(versions: Versions) -> list[Step]:
    ld = hb.kubernetes_ldflags(versions.kubernetes)
    return [
        Step(
            name="e2e.test",
            argv=("test", "-c", "-vet=off", "-trimpath", f"-ldflags={ld}"),
            package="k8s.io/kubernetes/test/e2e",
        ),
        Step(
            name="ginkgo",
            argv=("build", "-trimpath", "-ldflags=-s -w"),
            package=f"{GINKGO_MODULE}/ginkgo",
        ),
        Step(
            name="agnhost",
            argv=("build", "-trimpath", "-ldflags=-s -w"),
            package="k8s.io/kubernetes/test/images/agnhost",
        ),
        Step(
            name="nc",
            argv=("build", "-trimpath", "-ldflags=-s -w"),
            package=".",
            source=NC_SOURCE,
        ),
    ]


def step_recipe(step: Step, versions: Versions, go_version: str) -> str:
    template = (hb.WRAPPERS / "kubernetes.go.mod.in").read_text()
    parts = [go_version, step.package, *step.argv, "CGO_ENABLED=0", versions.kubernetes]
    parts += [versions.kubernetes_staging, template]
    if step.source is not None:
        parts += [(step.source / f).read_text() for f in ("go.mod", "main.go")]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()


def prepare_wrapper(versions: Versions) -> Path:
    directory = cache_dir() / "go" / "src" / f"e2e-{versions.kubernetes}"
    directory.mkdir(parents=True, exist_ok=True)
    text = hb.wrapper_go_mod(versions, "kubernetes")
    (directory / "go.mod").write_text(text.replace("k8s-build", "k8s-e2e-build", 1))
    return directory


def ensure_suite(*, quiet: bool = False) -> Suite:
    """Build whatever of the suite is missing or stale; return where it is."""
    if shutil.which("go") is None:
        raise SystemExit("`go` is not on PATH: the build needs the Go toolchain (1.26 or newer)")
    versions = load_versions()
    suite = suite_dir(versions)
    go_version = hb.go("env", "GOVERSION").strip()
    with hb.build_lock():
        todo = [
            s
            for s in steps(versions)
            if not _fresh(suite.directory, s.name, step_recipe(s, versions, go_version))
        ]
        if not todo:
            if not quiet:
                hb.say(f"e2e suite up to date in {suite.directory}")
            return suite
        workdir = prepare_wrapper(versions)
        suite.directory.mkdir(parents=True, exist_ok=True)
        for step in todo:
            hb.say(f"building {step.name} ({step.package}) ...")
            started = time.monotonic()
            partial = suite.directory / f".{step.name}.partial"
            argv = ["go", *step.argv, "-o", str(partial), step.package]
            cwd = step.source or workdir
            done = subprocess.run(argv, cwd=cwd, env=hb.go_env(), check=False)
            if done.returncode != 0:
                partial.unlink(missing_ok=True)
                raise SystemExit(f"building {step.name} failed (go exit {done.returncode})")
            partial.rename(suite.directory / step.name)
            stamp = suite.directory / f"{step.name}.recipe"
            stamp.write_text(step_recipe(step, versions, go_version) + "\n")
            hb.say(f"built {step.name} in {hb.duration(time.monotonic() - started)}")
    return suite


def _fresh(directory: Path, name: str, wanted: str) -> bool:
    stamp = directory / f"{name}.recipe"
    return (directory / name).is_file() and stamp.is_file() and stamp.read_text().strip() == wanted
