"""What goes into each locally built image, from files on this machine only.

- `pause`: `pause.c` (next to this file) compiled here with `gcc -static`, as `/pause`.
- `busybox`: Debian's static `/bin/busybox` (package busybox-static) as `/bin/busybox`, a
  symlink for every applet it lists (`busybox --list-full`), `/etc/passwd`, `/etc/group`,
  `/tmp`, `/root`.

Each recipe also gives a fingerprint of its inputs; the cache key is built from it.
"""

from __future__ import annotations

import dataclasses
import hashlib
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path

from harness.images.oci import Entry, ImageConfig

HERE = Path(__file__).resolve().parent
PAUSE_SOURCE = HERE / "pause.c"
BUSYBOX = Path("/bin/busybox")
GCC_FLAGS = ("-static", "-Os", "-s", "-Wall", "-Wextra", "-Werror", "-Wl,--build-id=none")
PATH_ENV = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

PASSWD = b"""root:x:0:0:root:/root:/bin/sh
daemon:x:1:1:daemon:/usr/sbin:/bin/false
www-data:x:33:33:www-data:/var/www:/bin/false
nobody:x:65534:65534:nobody:/nonexistent:/bin/false
"""
GROUP = b"""root:x:0:
daemon:x:1:
www-data:x:33:
nogroup:x:65534:
"""


@dataclasses.dataclass(frozen=True, slots=True)
class Recipe:
    """How to make one image: its default name, a fingerprint of its inputs, its files."""

    default_name: str
    fingerprint: Callable[[], str]
    entries: Callable[[], list[Entry]]
    config: ImageConfig


def _sha256_file(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _gcc_version() -> str:
    out = subprocess.run(["gcc", "--version"], check=True, capture_output=True, text=True)
    return out.stdout.splitlines()[0]


def _pause_fingerprint() -> str:
    return f"pause.c={_sha256_file(PAUSE_SOURCE)} gcc={_gcc_version()} flags={GCC_FLAGS}"


def compile_pause() -> bytes:
    """Compile `pause.c` into a static, stripped binary and return its bytes."""
    with tempfile.TemporaryDirectory(prefix="na-pause-") as tmp:
        src = Path(tmp) / "pause.c"  # a fixed file name keeps the binary reproducible
        shutil.copyfile(PAUSE_SOURCE, src)
        out = Path(tmp) / "pause"
        subprocess.run(["gcc", *GCC_FLAGS, "-o", str(out), str(src)], check=True, cwd=tmp)
        return out.read_bytes()


def _pause_entries() -> list[Entry]:
    return [Entry(path="pause", kind="file", mode=0o755, data=compile_pause())]


def _busybox_fingerprint() -> str:
    return f"busybox={_sha256_file(BUSYBOX)}"


def busybox_applets() -> list[str]:
    """Applet paths as busybox installs them (`bin/sh`, `usr/sbin/httpd`, ...)."""
    out = subprocess.run(
        [str(BUSYBOX), "--list-full"], check=True, capture_output=True, text=True
    ).stdout
    return sorted(p for p in out.split() if "/" in p and p != "bin/busybox")


def _busybox_entries() -> list[Entry]:
    entries = [
        Entry(path="bin/busybox", kind="file", mode=0o755, data=BUSYBOX.read_bytes()),
        Entry(path="etc/passwd", kind="file", mode=0o644, data=PASSWD),
        Entry(path="etc/group", kind="file", mode=0o644, data=GROUP),
        Entry(path="tmp", kind="dir", mode=0o1777),
        Entry(path="root", kind="dir", mode=0o700),
        Entry(path="var/www", kind="dir", mode=0o755),
    ]
    entries += [Entry(path=p, kind="symlink", target="/bin/busybox") for p in busybox_applets()]
    return entries


RECIPES: dict[str, Recipe] = {
    "pause": Recipe(
        default_name="localhost/pause:latest",
        fingerprint=_pause_fingerprint,
        entries=_pause_entries,
        config=ImageConfig(entrypoint=("/pause",), user="65535:65535", env=(PATH_ENV,)),
    ),
    "busybox": Recipe(
        default_name="localhost/busybox:latest",
        fingerprint=_busybox_fingerprint,
        entries=_busybox_entries,
        config=ImageConfig(cmd=("sh",), env=(PATH_ENV,)),
    ),
}
