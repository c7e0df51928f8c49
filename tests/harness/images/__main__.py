"""`python -m harness.images build --out DIR [--name RECIPE=NAME ...] [--cache DIR]`."""

from __future__ import annotations

import argparse
import sys
import time
from collections import defaultdict
from pathlib import Path

from harness.images.build import DEFAULT_CACHE, build_image, export
from harness.images.recipes import RECIPES


def _parse_names(pairs: list[str]) -> dict[str, list[str]]:
    extra: dict[str, list[str]] = defaultdict(list)
    for pair in pairs:
        recipe, sep, name = pair.partition("=")
        if not sep or recipe not in RECIPES or not name:
            raise SystemExit(f"--name wants RECIPE=NAME with RECIPE in {sorted(RECIPES)}: {pair}")
        extra[recipe].append(name)
    return extra


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness.images")
    sub = parser.add_subparsers(dest="command", required=True)
    build = sub.add_parser("build", help="build the pause and busybox images")
    build.add_argument("--out", type=Path, help="also copy <recipe>.tar and <recipe>/ here")
    build.add_argument("--name", action="append", default=[], metavar="RECIPE=NAME")
    build.add_argument("--cache", type=Path, default=DEFAULT_CACHE)
    args = parser.parse_args(argv)
    extra = _parse_names(args.name)
    for recipe in RECIPES:
        started = time.monotonic()
        image = build_image(recipe, extra_names=extra.get(recipe, ()), cache_dir=args.cache)
        if args.out is not None:
            image = export(image, args.out)
        took = time.monotonic() - started
        state = "cached" if image.cached else "built"
        print(f"{recipe}: {state} in {took:.2f}s {image.manifest_digest} {image.tarball}")
        for name in image.names:
            print(f"  {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
