"""Static pods: pods from manifest files in ``staticPodPath``, run without the API server,
shown in the API as mirror pods once the Node is registered (the kubelet's file source and
mirror client).

- ``manifest.py`` — one manifest to the pod the agent runs (UID, name, annotations): pure;
- ``reader.py`` — the filesystem boundary (``DirectoryReader``; a fake in ``testing``);
- ``source.py`` — :class:`FileSource`, the manager that re-reads the path every
  ``fileCheckFrequency`` and is a pod store;
- ``stores.py`` — :class:`PodSources`, the file source and the API source as one store for
  the sync loop;
- ``mirror.py`` — which mirror pods to create and delete: pure; ``mirror_manager.py`` —
  :class:`MirrorPods`, the manager that does it (API mode only): from the static pods and the
  Node object, mirror pods created, recreated and deleted with the kubelet's annotations and
  a Node ownerReference;
- ``status.py`` — :class:`MirrorStatusApi`: a static pod's status goes to its mirror pod, and
  again when the mirror's drifted from it (the node lifecycle controller's Ready False);
- ``standalone.py`` — :class:`NoApiServer`, the API of a node without credentials.
"""

from nodeagent.staticpods.manifest import ManifestError, parse_manifest, static_pod
from nodeagent.staticpods.mirror import MirrorIndex, mirror_pod_body, plan_mirror_pods
from nodeagent.staticpods.mirror_manager import MirrorPods
from nodeagent.staticpods.reader import DirectoryReader, Listing, ManifestFile, ManifestReader
from nodeagent.staticpods.source import FileSource
from nodeagent.staticpods.standalone import NoApiServer
from nodeagent.staticpods.status import MirrorStatusApi
from nodeagent.staticpods.stores import PodSources

__all__ = [
    "DirectoryReader",
    "FileSource",
    "Listing",
    "ManifestError",
    "ManifestFile",
    "ManifestReader",
    "MirrorIndex",
    "MirrorPods",
    "MirrorStatusApi",
    "NoApiServer",
    "PodSources",
    "mirror_pod_body",
    "parse_manifest",
    "plan_mirror_pods",
    "static_pod",
]
