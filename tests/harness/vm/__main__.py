"""``python -m harness.vm build|boot [--deb FILE]``: build the cached image, or boot and provision.

- ``build``: make sure the image for this .deb's dependencies is cached (what `make vm-test` needs
  first); prints each step and its time.
- ``boot``: build if needed, boot an overlay, run ``provision.sh`` with the .deb, print timings
  and ``systemctl status nodeagent``, then shut the VM down. A manual smoke test of the tier.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

from harness.versions import cache_dir
from harness.vm import Machine, deb_depends, ensure_image, recipe_for, tier
from harness.vm.guest import provision

REPO = Path(__file__).resolve().parents[3]


def newest_deb(dist: Path) -> Path:
    deb = tier.newest_deb(dist)
    if deb is None:
        raise SystemExit(f"no nodeagent_*_amd64.deb in {dist}: run `make packages` first")
    return deb


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness.vm")
    parser.add_argument("command", choices=["build", "boot"])
    parser.add_argument("--deb", type=Path, help="default: the newest .deb in dist/")
    args = parser.parse_args(argv)
    deb = args.deb or newest_deb(REPO / "dist")

    started = time.monotonic()
    image = ensure_image(recipe_for(deb_depends(deb)), cache=cache_dir())
    print(f"image ready in {time.monotonic() - started:.0f}s: {image.directory}")
    if args.command == "build":
        return 0
    with (
        tempfile.TemporaryDirectory(prefix="nodeagent-vm-") as tmp,
        Machine(image=image, run_dir=Path(tmp)) as vm,
    ):
        print(f"booted to control-ready in {vm.wait_for_boot():.1f}s")
        t = time.monotonic()
        print(provision(vm, deb))
        print(f"provisioned in {time.monotonic() - t:.1f}s")
        print(vm.run("systemctl status --no-pager nodeagent").stdout)
        return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
