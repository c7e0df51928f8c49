"""Build the local images once and keep them in a cache keyed by everything that went in.

A cache entry `<cache>/<recipe>-<key>/` holds `layout/` (an OCI image layout, what the registry
push reads) and `image.tar` (the same layout as one tar, what `ctr images import` reads). The key
hashes the recipe's input fingerprint (source and compiler, or the busybox binary), the image
names and the builder's own source, so a warm build does no work and any change rebuilds.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterable, Mapping
from pathlib import Path

from harness import versions
from harness.images import oci
from harness.images.recipes import RECIPES, Recipe

DEFAULT_CACHE = versions.cache_dir() / "images"  # ~/.cache/nodeagent/images unless NODEAGENT_CACHE
_BUILDER_SOURCES = ("oci.py", "recipes.py", "build.py", "pause.c")


@dataclasses.dataclass(frozen=True, slots=True)
class BuiltImage:
    """A built image: an OCI layout directory plus the same layout packed as a tarball."""

    recipe: str
    names: tuple[str, ...]
    layout: Path
    tarball: Path
    manifest_digest: str
    config_digest: str
    cached: bool

    @property
    def name(self) -> str:
        return self.names[0]


def _builder_hash() -> str:
    here = Path(__file__).resolve().parent
    h = hashlib.sha256()
    for name in _BUILDER_SOURCES:
        h.update(name.encode() + b"\0" + (here / name).read_bytes())
    return h.hexdigest()


def cache_key(recipe: str, names: Iterable[str]) -> str:
    spec = {
        "recipe": recipe,
        "inputs": RECIPES[recipe].fingerprint(),
        "names": list(names),
        "builder": _builder_hash(),
    }
    return hashlib.sha256(oci.canonical_json(spec)).hexdigest()[:20]


def image_names(recipe: Recipe, extra: Iterable[str] = ()) -> tuple[str, ...]:
    return tuple(dict.fromkeys([recipe.default_name, *extra]))


def _from_cache(recipe: str, entry: Path, *, cached: bool) -> BuiltImage:
    layout = entry / "layout"
    descriptors = oci.read_index(layout)
    manifest = json.loads(oci.read_blob(layout, descriptors[0]["digest"]))
    return BuiltImage(
        recipe=recipe,
        names=tuple(d["annotations"][oci.ANNOTATION_IMAGE_NAME] for d in descriptors),
        layout=layout,
        tarball=entry / "image.tar",
        manifest_digest=descriptors[0]["digest"],
        config_digest=manifest["config"]["digest"],
        cached=cached,
    )


def build_image(
    recipe: str, *, extra_names: Iterable[str] = (), cache_dir: Path = DEFAULT_CACHE
) -> BuiltImage:
    """Build (or find in the cache) one image under its default name plus `extra_names`."""
    spec = RECIPES[recipe]
    names = image_names(spec, extra_names)
    entry = cache_dir / f"{recipe}-{cache_key(recipe, names)}"
    if (entry / "image.tar").is_file():
        return _from_cache(recipe, entry, cached=True)
    cache_dir.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".{recipe}-", dir=cache_dir))
    work.chmod(0o755)
    try:
        oci.write_layout(work / "layout", entries=spec.entries(), config=spec.config, names=names)
        oci.pack(work / "layout", work / "image.tar")
        try:
            os.rename(work, entry)  # atomic: a concurrent builder's equal result may win
        except OSError:
            if not (entry / "image.tar").is_file():
                raise
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return _from_cache(recipe, entry, cached=False)


def build_images(
    *, extra_names: Mapping[str, Iterable[str]] | None = None, cache_dir: Path = DEFAULT_CACHE
) -> dict[str, BuiltImage]:
    """Build every recipe (pause, busybox); `extra_names` maps recipe -> additional names."""
    extra = extra_names or {}
    return {
        recipe: build_image(recipe, extra_names=extra.get(recipe, ()), cache_dir=cache_dir)
        for recipe in RECIPES
    }


def export(image: BuiltImage, out_dir: Path) -> BuiltImage:
    """Copy a built image to `out_dir/<recipe>.tar` and `out_dir/<recipe>/` (its layout)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    tarball = out_dir / f"{image.recipe}.tar"
    layout = out_dir / image.recipe
    shutil.copyfile(image.tarball, tarball)
    shutil.rmtree(layout, ignore_errors=True)
    shutil.copytree(image.layout, layout)
    return dataclasses.replace(image, tarball=tarball, layout=layout)
