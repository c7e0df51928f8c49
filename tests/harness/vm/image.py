"""The base disk image of the test VM: debootstrapped Debian 12, cached by the hash of its recipe.

``ensure_image(recipe)`` returns the cached image, building it first if needed:

1. ``debootstrap --variant=minbase --include=<packages>`` into a scratch root (the .debs are
   cached in ``<cache>/vm/debs`` so a rebuild downloads nothing new);
2. :func:`harness.vm.rootfs.configure` (hostname, network, guest agent, masks) and a small
   initramfs;
3. kernel and initramfs copied out for direct boot;
4. ``mkfs.ext4 -d <root>`` (no loop mount, no mount at all) then ``qemu-img convert`` to qcow2.

The result lands atomically in ``<cache>/vm/<recipe hash>/`` (``base.qcow2``, ``vmlinuz``,
``initrd.img``, ``recipe.json``). Runs never write to it: each boots its own qcow2 overlay.
The recipe hash covers the suite, the package list (base list + the .deb's Depends) and the
source of the modules that shape the image, so editing any of them builds a new image.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import shutil
import subprocess
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from harness.vm import rootfs

SUITE = "bookworm"
DEFAULT_MIRROR = "http://deb.debian.org/debian"  # what the CI host's apt sources use
DISK_SIZE = "8G"
KEEP_IMAGES = 2
# What the guest needs besides the .deb's own Depends, for what the system tests exercise:
# systemd, journald, logind, D-Bus, cgroup v2, swap, nftables, containerd, runc, CNI plugins,
# python3 for the guest agent.
BASE_PACKAGES = (
    "linux-image-amd64",
    "initramfs-tools",
    "systemd",
    "systemd-sysv",
    "libpam-systemd",
    "dbus",
    "udev",
    "kmod",
    "procps",
    "iproute2",
    "nftables",
    "conntrack",
    "containerd",
    "runc",
    "containernetworking-plugins",
    "python3",
    "ca-certificates",
)
_HERE = Path(__file__).parent
# The code whose content shapes the image; a change to any of these is a new recipe.
SOURCES = (_HERE / "image.py", _HERE / "rootfs.py", _HERE / "guest_agent.py")

Progress = Callable[[str], None]


@dataclass(frozen=True, kw_only=True)
class Image:
    directory: Path
    disk: Path
    kernel: Path
    initrd: Path


@dataclass(frozen=True, kw_only=True)
class Recipe:
    packages: tuple[str, ...]
    suite: str = SUITE
    sources: tuple[Path, ...] = SOURCES

    def describe(self) -> dict[str, object]:
        return {
            "suite": self.suite,
            "packages": list(self.packages),
            "sources": {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in self.sources},
        }

    def digest(self) -> str:
        text = json.dumps(self.describe(), sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:16]


def recipe_for(deb_depends: Iterable[str]) -> Recipe:
    return Recipe(packages=tuple(sorted({*BASE_PACKAGES, *deb_depends})))


def parse_depends(field: str) -> list[str]:
    """Package names of a Depends field: first alternative, no versions or arch qualifiers."""
    names = []
    for clause in field.split(","):
        first = clause.split("|")[0].strip()
        if first:
            names.append(re.split(r"[\s(:\[]", first, maxsplit=1)[0])
    return names


def deb_depends(deb: Path) -> list[str]:
    field = subprocess.run(
        ["dpkg-deb", "--field", str(deb), "Depends"], check=True, capture_output=True, text=True
    ).stdout
    return parse_depends(field)


def image_dir(cache: Path, recipe: Recipe) -> Path:
    return cache / "vm" / recipe.digest()


def _image_in(directory: Path) -> Image:
    return Image(
        directory=directory,
        disk=directory / "base.qcow2",
        kernel=directory / "vmlinuz",
        initrd=directory / "initrd.img",
    )


def ensure_image(recipe: Recipe, *, cache: Path, progress: Progress = print) -> Image:
    """The cached image for ``recipe``; built (minutes, cold) only if missing."""
    final = image_dir(cache, recipe)
    final.parent.mkdir(parents=True, exist_ok=True)
    with _locked(final.parent / ".build.lock"):
        if (final / "recipe.json").exists():
            os.utime(final)  # most recently used, for pruning
            return _image_in(final)
        progress(f"building VM image {final.name} (cold: a few minutes)")
        started = time.monotonic()
        scratch = final.with_name(f"{final.name}.building")
        _remove_tree(scratch)
        scratch.mkdir()
        try:
            _build(recipe, scratch, cache=cache, progress=progress)
            (scratch / "recipe.json").write_text(json.dumps(recipe.describe(), indent=1) + "\n")
            scratch.rename(final)
        finally:
            _remove_tree(scratch)
        progress(f"VM image built in {time.monotonic() - started:.0f}s: {final}")
        _prune(final.parent, keep=KEEP_IMAGES)
        return _image_in(final)


def _build(recipe: Recipe, out: Path, *, cache: Path, progress: Progress) -> None:
    root = out / "root"
    debs = cache / "vm" / "debs"
    debs.mkdir(parents=True, exist_ok=True)
    mirror = os.environ.get("NODEAGENT_DEBIAN_MIRROR", DEFAULT_MIRROR)
    with _step(progress, f"debootstrap {recipe.suite} ({len(recipe.packages)} packages)"):
        _run(
            "debootstrap", "--variant=minbase", f"--cache-dir={debs}",
            f"--include={','.join(recipe.packages)}", recipe.suite, str(root), mirror,
        )  # fmt: skip
        _assert_no_mounts(root)
    with _step(progress, "configuring the guest"):
        rootfs.configure(root, agent_source=_HERE / "guest_agent.py")
        rootfs.shrink_initramfs(root)
        kernel, initrd = rootfs.kernel_and_initrd(root)
        shutil.copyfile(kernel, out / "vmlinuz")
        shutil.copyfile(initrd, out / "initrd.img")
    with _step(progress, "mkfs.ext4 -d and qemu-img convert"):
        raw = out / "base.raw"
        _run("mkfs.ext4", "-q", "-F", "-L", "nodeagent-vm", "-d", str(root), str(raw), DISK_SIZE)
        _run("qemu-img", "convert", "-O", "qcow2", str(raw), str(out / "base.qcow2"))
        raw.unlink()
        _remove_tree(root)


@contextmanager
def _step(progress: Progress, what: str) -> Iterator[None]:
    started = time.monotonic()
    progress(f"  {what} ...")
    yield
    progress(f"  {what}: {time.monotonic() - started:.0f}s")


def _run(*argv: str) -> None:
    proc = subprocess.run(argv, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        tail = (proc.stdout + proc.stderr)[-4000:]
        raise RuntimeError(f"{argv[0]} failed with exit code {proc.returncode}:\n{tail}")


def _mounts_under(path: Path) -> list[str]:
    prefix = str(path.resolve())
    with open("/proc/self/mounts", encoding="utf-8") as f:
        points = [line.split()[1].replace("\\040", " ") for line in f]
    return [p for p in points if p == prefix or p.startswith(prefix + "/")]


def _assert_no_mounts(root: Path) -> None:
    # mkfs.ext4 -d would copy a mounted /proc into the image; debootstrap should have unmounted.
    if mounts := _mounts_under(root):
        raise RuntimeError(f"mounts left under {root}: {mounts}")


def _remove_tree(path: Path) -> None:
    """rm -rf that first unmounts anything below ``path`` (a failed debootstrap can leave some)."""
    if not path.exists():
        return
    for point in sorted(_mounts_under(path), key=len, reverse=True):
        subprocess.run(["umount", "-l", point], check=False, capture_output=True)
    subprocess.run(["rm", "-rf", "--one-file-system", str(path)], check=True)


def _prune(vm_dir: Path, *, keep: int) -> None:
    """Keep only the ``keep`` most recently used images (each is about 1 GB)."""
    images = sorted(
        (d for d in vm_dir.iterdir() if (d / "recipe.json").exists()),
        key=lambda d: d.stat().st_mtime,
        reverse=True,
    )
    for old in images[keep:]:
        _remove_tree(old)


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    with open(path, "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)
