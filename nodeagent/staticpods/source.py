"""The file source: the static pods of ``staticPodPath``, re-read every ``fileCheckFrequency``.

``run()`` reads the path at once, then every ``period`` seconds (the kubelet's
``fileCheckFrequency``, 20s by default), and replaces its pods with what it found, as the
kubelet's file source sends a whole new set each time:

- a missing path means no static pods (logged once);
- a path that cannot be listed keeps the previous pods, and the source is not ``synced``
  until it has been listed once (so housekeeping never kills pods it merely cannot read);
- a bad manifest is logged with its file, field and problem (again only when that changes)
  and left out; the other manifests still run. Whatever goes wrong with one file (any
  exception, not only :class:`ManifestError`) stays with that file. A manifest that turns bad
  stops its pod, as in the kubelet: the file no longer describes a pod;
- manifests are parsed in a worker thread (``asyncio.to_thread``), never on the event loop,
  and only when they changed: the result is kept per path and file stamp (device, inode,
  size, mtime; the content itself for readers without stamps);
- two manifests naming the same pod: the first file (in name order) wins.

A manifest that changes gets a new UID (the hash of its content): the old pod goes, the new
one comes. ``kubernetes.io/config.seen`` is stamped the first time a UID is seen.
The source is a store (``items``, ``resource_version``, waits) for :class:`PodSources`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, Final

from nodeagent.clock import Clock
from nodeagent.gotext import rfc3339_nano_fixed
from nodeagent.log import Logger, get_logger
from nodeagent.staticpods.manifest import (
    CONFIG_SEEN_ANNOTATION,
    ManifestError,
    parse_manifest,
    static_pod,
)
from nodeagent.staticpods.reader import DirectoryReader, Listing, ManifestFile, ManifestReader

DEFAULT_PERIOD: Final = 20.0
ERROR_TEXT_MAX: Final = 300

Decoded = dict[str, Any] | ManifestError
Decoder = Callable[[bytes, str, str], Decoded]
"""``(data, path, node_name)`` to the pod or the error: :func:`decode_file`."""


def unexpected(path: str, e: Exception) -> ManifestError:
    text = f"{type(e).__name__}: {e}"
    if len(text) > ERROR_TEXT_MAX:
        text = text[: ERROR_TEXT_MAX - 3] + "..."
    return ManifestError(path, "", f"cannot be read as a pod: {text}")


def decode_file(data: bytes, path: str, node_name: str) -> Decoded:
    """One manifest file to its pod, or the error that says why not; never raises.
    Blocking: :class:`FileSource` runs it in a thread."""
    try:
        return static_pod(parse_manifest(data, path=path), path=path, node_name=node_name)
    except ManifestError as e:
        return e
    except Exception as e:  # one file, whatever its content, never stops the others
        return unexpected(path, e)


class FileSource:
    def __init__(
        self,
        *,
        path: str,
        node_name: str,
        clock: Clock,
        period: float = DEFAULT_PERIOD,
        reader: ManifestReader | None = None,
        decode: Decoder = decode_file,
        log: Logger | None = None,
    ) -> None:
        """``decode`` runs in a worker thread, once per new or changed file."""
        self._path = path
        self._node = node_name
        self._clock = clock
        self._period = period
        self._reader = reader or DirectoryReader()
        self._decode_file = decode
        self._log = (log or get_logger("staticpods")).bind(static_pod_path=path)
        self._pods: dict[str, dict[str, Any]] = {}  # by uid, in file order
        self._files: dict[str, str] = {}  # uid -> manifest path
        self._seen: dict[str, str] = {}
        self._issued: set[str] = set()
        self._problems: dict[str, str] = {}  # path -> what was last reported about it
        self._decoded: dict[str, tuple[object, Decoded]] = {}  # path -> (stamp, result)
        self._rv = 0
        self._synced = asyncio.Event()
        self._changed = asyncio.Event()

    @property
    def name(self) -> str:
        return "staticpods:file"

    # --- the store -----------------------------------------------------------------------

    @property
    def synced(self) -> bool:
        return self._synced.is_set()

    @property
    def resource_version(self) -> str:
        return str(self._rv) if self._rv else ""

    def items(self) -> list[dict[str, Any]]:
        return list(self._pods.values())

    async def wait_synced(self) -> None:
        await self._synced.wait()

    async def wait_for(self, predicate: Callable[[Any], bool]) -> None:
        while not predicate(self):
            await self._changed.wait()

    # --- queries -------------------------------------------------------------------------

    def has(self, uid: str) -> bool:
        """``uid`` is a static pod of the current manifests."""
        return uid in self._pods

    def issued(self, uid: str) -> bool:
        """``uid`` was a static pod of this source at some point (it may be terminating)."""
        return uid in self._issued

    def manifest_path(self, uid: str) -> str | None:
        return self._files.get(uid)

    # --- running -------------------------------------------------------------------------

    async def run(self) -> None:
        if not self._path:
            self._replace({}, {})
            await asyncio.Event().wait()
        while True:
            await self.scan_once()
            await asyncio.sleep(self._period)

    async def scan_once(self) -> None:
        try:
            listing = await self._reader.read(self._path)
        except OSError as e:
            self._report(self._path, "", str(e), what="Cannot read the static pod path")
            return
        if not listing.exists:
            if self._problems.get(self._path) != "missing":
                self._problems = {self._path: "missing"}
                self._log.info("Static pod path does not exist; no static pods")
            self._replace({}, {})
            return
        self._problems.pop(self._path, None)
        self._replace(*(await self._extract(listing)))

    async def _decode(self, f: ManifestFile) -> Decoded:
        key: object = f.stamp if f.stamp is not None else f.data
        cached = self._decoded.get(f.path)
        if cached is not None and cached[0] == key:
            return cached[1]
        try:
            result = await asyncio.to_thread(self._decode_file, f.data, f.path, self._node)
        except Exception as e:  # the decoder's own guard failed: still only this file
            result = unexpected(f.path, e)
        self._decoded[f.path] = (key, result)
        return result

    async def _extract(self, listing: Listing) -> tuple[dict[str, dict[str, Any]], dict[str, str]]:
        pods: dict[str, dict[str, Any]] = {}
        files: dict[str, str] = {}
        names: dict[tuple[str, str], str] = {}
        reported: set[str] = set()
        for f in listing.files:
            reported.add(f.path)
            if f.error:
                self._report(f.path, "", f.error)
                continue
            decoded = await self._decode(f)
            if isinstance(decoded, ManifestError):
                self._report(f.path, decoded.field, decoded.message)
                continue
            pod = decoded
            meta = pod["metadata"]
            key = (meta["namespace"], meta["name"])
            if key in names:
                self._report(
                    f.path,
                    "metadata.name",
                    f"duplicate pod name {meta['namespace']}/{meta['name']}, already defined"
                    f" in {names[key]}; ignoring this file",
                )
                continue
            names[key] = f.path
            self._problems.pop(f.path, None)
            pods[meta["uid"]] = pod
            files[meta["uid"]] = f.path
        for path in [p for p in self._problems if p not in reported]:
            del self._problems[path]
        for path in [p for p in self._decoded if p not in reported]:
            del self._decoded[path]
        return pods, files

    def _report(
        self,
        path: str,
        field: str,
        message: str,
        *,
        what: str = "Invalid static pod manifest; ignoring it",
    ) -> None:
        text = f"{field}: {message}" if field else message
        if self._problems.get(path) == text:
            return
        self._problems[path] = text
        fields = {"field": field} if field else {}
        self._log.error(what, path=path, error=message, **fields)

    def _replace(self, pods: dict[str, dict[str, Any]], files: dict[str, str]) -> None:
        # the kubelet stamps kubetypes.NewTimestamp().GetString(): RFC3339NanoFixed
        now = rfc3339_nano_fixed(self._clock.now())
        for uid, pod in list(pods.items()):
            seen = self._seen.setdefault(uid, now)
            meta = pod["metadata"]
            annotations = {**meta["annotations"], CONFIG_SEEN_ANNOTATION: seen}
            pods[uid] = {**pod, "metadata": {**meta, "annotations": annotations}}
        for uid in pods.keys() - self._pods.keys():
            meta = pods[uid]["metadata"]
            self._log.info(
                "Static pod added",
                path=files[uid],
                pod_namespace=meta["namespace"],
                pod_name=meta["name"],
                pod_uid=uid,
            )
        for uid in self._pods.keys() - pods.keys():
            meta = self._pods[uid]["metadata"]
            self._log.info(
                "Static pod removed",
                path=self._files.get(uid, ""),
                pod_namespace=meta["namespace"],
                pod_name=meta["name"],
                pod_uid=uid,
            )
        self._seen = {uid: self._seen[uid] for uid in pods}
        self._issued.update(pods)
        changed = pods.keys() != self._pods.keys() or not self.synced
        self._pods, self._files = pods, files
        self._synced.set()
        if changed:
            self._rv += 1
            self._changed.set()
            self._changed = asyncio.Event()
