"""Registry mirrors: stock image names (``busybox``, ``registry.k8s.io/pause:3.10.2``, the e2e
suite's ``registry.k8s.io/e2e-test-images/...``) pulled from the local registry, never the
internet.

containerd reads ``<config_path>/<registry host>/hosts.toml`` on every pull. For each mirrored
upstream registry this module writes one whose ``server`` (the host containerd falls back to
when no ``[host]`` entry answers, i.e. the only host) is the local registry under the path
``/v2/<upstream>`` with ``override_path``. So a pull of ``docker.io/library/busybox:latest``
asks ``http://127.0.0.1:PORT/v2/docker.io/library/busybox/manifests/latest``: the local
registry's repository ``docker.io/library/busybox``. Every upstream gets its own prefix, so
two registries' images of the same path never collide, and the upstream is never contacted
(a name not pushed fails at once with ``not found``).

    write_mirrors(hosts_dir, registry.host)
    push_mirrored(registry.host, image.layout, "busybox")   # -> docker.io/library/busybox:latest
    mirror_reference("registry.k8s.io/pause:3.10.2")        # -> registry.k8s.io/pause:3.10.2

A registry host not listed here (and not configured otherwise) is still resolved by containerd
the usual way (DNS, HTTPS); add it to ``MIRRORED_REGISTRIES`` to keep it local.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path

from harness.registry import push_image

# The registries of stock manifests and of the Kubernetes e2e suite's image list
# (test/utils/image/manifest.go: registry.k8s.io/{e2e-test-images,build-image,sig-storage,...},
# gcr.io/k8s-authenticated-test, invalid.registry.k8s.io/invalid, docker.io/library), plus the
# other public registries manifests commonly name.
MIRRORED_REGISTRIES: tuple[str, ...] = (
    "docker.io",
    "registry.k8s.io",
    "k8s.gcr.io",
    "gcr.io",
    "quay.io",
    "ghcr.io",
    "mcr.microsoft.com",
    "invalid.registry.k8s.io",
)
DEFAULT_REGISTRY = "docker.io"
# The names the locally built images are pushed under (besides <recipe>:latest), so stock
# manifests pull them: `busybox` and the tags manifests and docs use, the e2e suite's busybox,
# and the pause image at the version kubeadm 1.36 pins (3.10.2) and the older ones still named.
STOCK_NAMES: dict[str, tuple[str, ...]] = {
    "busybox": (
        "docker.io/library/busybox:latest",
        "docker.io/library/busybox:1.28",
        "docker.io/library/busybox:1.36",
        "docker.io/library/busybox:1.37",
        "registry.k8s.io/e2e-test-images/busybox:1.37.0-1",
    ),
    "pause": (
        "registry.k8s.io/pause:3.10.2",
        "registry.k8s.io/pause:3.10.1",
        "registry.k8s.io/pause:3.10",
        "registry.k8s.io/pause:3.9",
        "registry.k8s.io/pause:3.6",
    ),
}
OFFICIAL_REPOSITORY_PREFIX = "library/"


def normalize(name: str) -> str:
    """A fully qualified reference, as the CRI normalises one: ``busybox`` ->
    ``docker.io/library/busybox:latest``; ``foo/bar:1`` -> ``docker.io/foo/bar:1``;
    ``registry.k8s.io/pause:3.10`` unchanged. Digests (``@sha256:...``) are kept."""
    if not name or name != name.strip():
        raise ValueError(f"invalid image reference {name!r}")
    first, slash, rest = name.partition("/")
    if slash and ("." in first or ":" in first or first == "localhost"):
        registry, path = first, rest
    else:
        registry, path = DEFAULT_REGISTRY, name
    if registry == DEFAULT_REGISTRY and "/" not in path.split("@")[0].split(":")[0]:
        path = OFFICIAL_REPOSITORY_PREFIX + path
    if "@" not in path and ":" not in path.rsplit("/", 1)[-1]:
        path += ":latest"
    return f"{registry}/{path}"


def mirror_reference(name: str) -> str:
    """The repository:tag a mirrored `name` is stored under in the local registry (the fully
    qualified name itself; push it with :func:`push_mirrored`)."""
    full = normalize(name)
    registry = full.split("/", 1)[0]
    if registry not in MIRRORED_REGISTRIES:
        raise ValueError(f"{name!r}: registry {registry!r} is not mirrored ({MIRRORED_REGISTRIES})")
    return full


def render_hosts_toml(upstream: str, local_host: str) -> str:
    """hosts.toml for `upstream`: the local registry under /v2/<upstream>, as the one `[host]`
    and as `server` (the fallback containerd tries last), so the upstream is never asked.
    containerd 1.6 needs a `[host]` table: without one it rejects the file ("invalid `host`
    tree") and pulls from the upstream as if there were no file."""
    url = json.dumps(f"http://{local_host}/v2/{upstream}")
    return (
        f"# {upstream} is served by the local registry {local_host} (harness/mirrors.py).\n"
        f"server = {url}\n"
        'capabilities = ["pull", "resolve"]\n'
        "override_path = true\n"
        "\n"
        f"[host.{url}]\n"
        '  capabilities = ["pull", "resolve"]\n'
        "  override_path = true\n"
    )


def write_mirrors(
    hosts_dir: Path, local_host: str, upstreams: Iterable[str] = MIRRORED_REGISTRIES
) -> list[Path]:
    """Write `hosts_dir/<upstream>/hosts.toml` for each upstream; returns the files."""
    written = []
    for upstream in upstreams:
        path = hosts_dir / upstream / "hosts.toml"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(render_hosts_toml(upstream, local_host))
        written.append(path)
    return written


def push_mirrored(local_host: str, layout: Path, name: str) -> str:
    """Push the image in `layout` so that a pull of `name` through the mirrors finds it;
    returns the fully qualified name."""
    if "@" in name:
        raise ValueError(f"{name!r}: push under a tag, not a digest")
    reference = mirror_reference(name)
    push_image(local_host, layout, reference)
    return reference


def push_stock(local_host: str, layouts: Mapping[str, Path]) -> list[str]:
    """Push each recipe's image (`layouts`: recipe -> OCI layout) under its `STOCK_NAMES`;
    returns the names pushed."""
    pushed = []
    for recipe, layout in layouts.items():
        for name in STOCK_NAMES.get(recipe, ()):
            pushed.append(push_mirrored(local_host, layout, name))
    return pushed
