"""Locally built OCI images for the tests and `make up` (no registry access needed).

    from harness.images import build_images
    images = build_images(extra_names={"pause": ["registry.k8s.io/pause:3.10"]})
    images["busybox"].tarball  # -> ctr images import
    images["busybox"].layout   # -> registry push

CLI: `python -m harness.images build --out DIR [--name RECIPE=NAME ...]`.
"""

from harness.images.build import DEFAULT_CACHE, BuiltImage, build_image, build_images, export
from harness.images.recipes import RECIPES

PAUSE_IMAGE = RECIPES["pause"].default_name
BUSYBOX_IMAGE = RECIPES["busybox"].default_name

__all__ = [
    "BUSYBOX_IMAGE",
    "DEFAULT_CACHE",
    "PAUSE_IMAGE",
    "RECIPES",
    "BuiltImage",
    "build_image",
    "build_images",
    "export",
]
