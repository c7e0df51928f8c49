"""A static pod directory in memory, implementing ``nodeagent.staticpods.ManifestReader``.

``manifests.write("web.yaml", text)`` and ``manifests.remove("web.yaml")`` change it;
``manifests.unreadable = "Permission denied"`` makes listing fail with ``OSError``;
``manifests.exists = False`` makes the directory vanish. ``reads`` counts listings.
"""

from __future__ import annotations

from nodeagent.staticpods.reader import Listing, ManifestFile

DIRECTORY = "/etc/kubernetes/manifests"


class MemoryManifests:
    def __init__(self, directory: str = DIRECTORY) -> None:
        self.directory = directory
        self.files: dict[str, bytes | str] = {}
        self.exists = True
        self.unreadable = ""
        self.reads = 0

    def path(self, name: str) -> str:
        return f"{self.directory}/{name}"

    def write(self, name: str, content: bytes | str) -> str:
        self.files[name] = content
        return self.path(name)

    def remove(self, name: str) -> None:
        del self.files[name]

    async def read(self, path: str) -> Listing:
        self.reads += 1
        if path != self.directory:
            return Listing(exists=False)
        if self.unreadable:
            raise PermissionError(13, self.unreadable, path)
        if not self.exists:
            return Listing(exists=False)
        return Listing(
            exists=True,
            files=tuple(
                ManifestFile(self.path(name), data=_bytes(content))
                for name, content in sorted(self.files.items())
                if not name.startswith(".")
            ),
        )


def _bytes(content: bytes | str) -> bytes:
    return content.encode() if isinstance(content, str) else content
