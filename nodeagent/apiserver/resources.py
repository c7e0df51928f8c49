"""The API resources nodeagent talks to, as descriptors that build request paths."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

Obj = dict[str, Any]
"""A Kubernetes object as decoded JSON. Managers convert to their own types at the edge."""


@dataclass(frozen=True, slots=True)
class Resource:
    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    def path(
        self,
        *,
        namespace: str | None = None,
        name: str | None = None,
        subresource: str | None = None,
    ) -> str:
        """``/api/v1/namespaces/<ns>/<plural>/<name>/<sub>`` (parts omitted when not given)."""
        base = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        if self.namespaced:
            if namespace:
                base += f"/namespaces/{namespace}"
            elif name is not None:
                raise ValueError(f"{self.plural} is namespaced: a namespace is required")
        elif namespace:
            raise ValueError(f"{self.plural} is cluster-scoped: no namespace allowed")
        base += f"/{self.plural}"
        if name is not None:
            if not name or "/" in name:
                raise ValueError(f"invalid object name {name!r}")
            base += f"/{name}"
        if subresource:
            if name is None:
                raise ValueError("a subresource needs an object name")
            base += f"/{subresource}"
        return base


NODES = Resource("", "v1", "nodes", "Node", namespaced=False)
EVENTS = Resource("", "v1", "events", "Event", namespaced=True)
PODS = Resource("", "v1", "pods", "Pod", namespaced=True)
SERVICES = Resource("", "v1", "services", "Service", namespaced=True)
CONFIGMAPS = Resource("", "v1", "configmaps", "ConfigMap", namespaced=True)
SECRETS = Resource("", "v1", "secrets", "Secret", namespaced=True)
NAMESPACES = Resource("", "v1", "namespaces", "Namespace", namespaced=False)
LEASES = Resource("coordination.k8s.io", "v1", "leases", "Lease", namespaced=True)
CSRS = Resource(
    "certificates.k8s.io",
    "v1",
    "certificatesigningrequests",
    "CertificateSigningRequest",
    namespaced=False,
)
