"""The container runtime over CRI runtime.v1: client, protocols, messages and errors.

The only package that imports ``cri_protos`` and ``grpc``. Typical use::

    from nodeagent import kuberuntime

    async with await kuberuntime.connect("unix:///run/containerd/containerd.sock") as cri:
        ref = await cri.pull_image("localhost:5000/busybox:1.36")
        images = await cri.list_images()
"""

from __future__ import annotations

from nodeagent.kuberuntime.endpoint import DEFAULT_ENDPOINT, RUNTIME_REQUEST_TIMEOUT
from nodeagent.kuberuntime.errors import (
    CriDeadlineExceeded,
    CriError,
    CriNotFound,
    CriUnavailable,
    CriUnimplemented,
    CriUnknown,
    CriVersionError,
    runtime_errors,
)
from nodeagent.kuberuntime.negotiate import connect, validate_v1
from nodeagent.kuberuntime.remote import CriClient
from nodeagent.kuberuntime.service import ImageService, RuntimeService

__all__ = [
    "DEFAULT_ENDPOINT",
    "RUNTIME_REQUEST_TIMEOUT",
    "CriClient",
    "CriDeadlineExceeded",
    "CriError",
    "CriNotFound",
    "CriUnavailable",
    "CriUnimplemented",
    "CriUnknown",
    "CriVersionError",
    "ImageService",
    "RuntimeService",
    "connect",
    "runtime_errors",
    "validate_v1",
]
