"""Reading the static pod path from the real filesystem (a temporary directory)."""

from __future__ import annotations

import os
from pathlib import Path

from nodeagent.staticpods import DirectoryReader, ManifestFile


async def test_a_directory_lists_its_manifests_in_name_order_without_dotfiles(
    tmp_path: Path,
) -> None:
    (tmp_path / "b.yaml").write_text("b")
    (tmp_path / "a.json").write_text("a")
    (tmp_path / ".a.yaml.swp").write_text("editor")
    (tmp_path / "sub").mkdir()
    os.mkfifo(tmp_path / "pipe")

    listing = await DirectoryReader().read(str(tmp_path))

    assert listing.exists
    assert listing.files == (
        ManifestFile(str(tmp_path / "a.json"), data=b"a"),
        ManifestFile(str(tmp_path / "b.yaml"), data=b"b"),
        ManifestFile(str(tmp_path / "pipe"), error="not a regular file"),
        ManifestFile(str(tmp_path / "sub"), error="a directory; not recursing into it"),
    )


async def test_a_path_that_is_one_file_is_that_manifest(tmp_path: Path) -> None:
    manifest = tmp_path / "web.yaml"
    manifest.write_text("kind: Pod")
    listing = await DirectoryReader().read(str(manifest))
    assert listing.files == (ManifestFile(str(manifest), data=b"kind: Pod"),)


async def test_a_missing_path_does_not_exist(tmp_path: Path) -> None:
    listing = await DirectoryReader().read(str(tmp_path / "missing"))
    assert not listing.exists and listing.files == ()
