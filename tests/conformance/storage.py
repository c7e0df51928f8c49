"""The storage selection of ``make conformance``: the ``[sig-storage]`` specs of the CSI hostpath
driver (``[Driver: csi-hostpath]``, which the suite deploys itself, per test, from the manifests
compiled into e2e.test) and of the in-tree ``local``, ``hostPath`` and ``hostPathSymlink``
drivers (the storage test suites and ``PersistentVolumes-local``), neither ``[Serial]``,
``[Disruptive]``, ``[Slow]`` nor ``[Flaky]``, and no ``[Feature:…]`` but those in
``FEATURES`` (what these drivers and this cluster have: VolumeAttributesClass is GA at the
pinned Kubernetes and the hostpath driver is deployed with ModifyVolume on).

The suite names the driver's images in
``test/e2e/testing-manifests/storage-csi/hostpath/hostpath/csi-hostpath-plugin.yaml``;
`suite_images` reads them from the module at KUBERNETES_VERSION and `push_images` pushes what
``harness.csi_hostpath`` builds under those names (``sig-storage/<name>:<tag>`` in the local
registry, where ``KUBE_TEST_REPO_LIST`` sends ``registry.k8s.io/sig-storage``). The sidecars
are built at their pins (tests/harness/versions.env), so an e2e tag can name a neighbouring
release of the same program; the plugin, registrar and probe are the harness's stand-in.

The suite deploys the driver with paths under the kubelet's root dir, given with
``--kubelet-root-dir`` (the node's, per peer).
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from harness import csi_hostpath

from conformance import report

FOCUS = (
    r"\[sig-storage\] (CSI Volumes \[Driver: csi-hostpath\]"
    r"|In-tree Volumes \[Driver: (local|hostPath|hostPathSymlink)\]"
    r"|PersistentVolumes-local )"
)
BASE_SKIP = r"\[Serial\]|\[Disruptive\]|\[Slow\]|\[Flaky\]"
FEATURES = frozenset({"VolumeAttributesClass"})
HOSTPATH_MANIFEST = (
    "test/e2e/testing-manifests/storage-csi/hostpath/hostpath/csi-hostpath-plugin.yaml"
)
IMAGE_LINE = re.compile(r"^\s*image:\s*registry\.k8s\.io/sig-storage/([\w.-]+):(\S+)\s*$", re.M)


def skip_for(names: list[str] | set[str], allowed: frozenset[str] = FEATURES) -> str:
    """The ginkgo skip regexp: `BASE_SKIP` and every ``[Feature:X]`` in `names` that is not
    allowed (RE2 has no look-ahead, so the tags to skip are listed)."""
    tags = sorted({t for n in names for t in re.findall(r"\[Feature:([^\]]+)\]", n)} - allowed)
    if not tags:
        return BASE_SKIP
    return BASE_SKIP + r"|\[Feature:(" + "|".join(re.escape(t) for t in tags) + r")\]"


def selected_names(
    e2e_test: Path, *, focus: str, skip: str, work: Path, env: dict[str, str]
) -> set[str]:
    """The specs a focus/skip selects (a ginkgo dry run)."""
    argv = [
        str(e2e_test),
        "--ginkgo.dry-run",
        f"--ginkgo.focus={focus}",
        f"--ginkgo.skip={skip}",
        "--provider=skeleton",
        f"--report-dir={work}",
    ]
    work.mkdir(parents=True, exist_ok=True)
    subprocess.run(argv, env=env, capture_output=True, check=False, cwd=work.parent)
    return {r.name for r in report.parse_junit(work / "junit_01.xml") if r.status == "passed"}


def suite_images(module: Path) -> dict[str, str]:
    """The sig-storage images (name -> tag) that the suite's hostpath manifest names."""
    text = (module / HOSTPATH_MANIFEST).read_text()
    return dict(IMAGE_LINE.findall(text))


def push_images(registry_host: str, module: Path, work: Path) -> list[str]:
    """Push the driver's images under the suite's names; returns what was pushed."""
    references = {name: [f"sig-storage/{name}:{tag}"] for name, tag in suite_images(module).items()}
    return csi_hostpath.push_tagged(registry_host, work, references)
