"""API objects for TLS bootstrap: bootstrap-token Secrets and the RBAC kubeadm installs for it.

Pure builders; `ControlPlane` applies them with kubectl.
"""

from __future__ import annotations

import datetime
import secrets
import string
from dataclasses import dataclass
from typing import Any

BOOTSTRAPPERS = "system:bootstrappers"
EXTRA_GROUP = "system:bootstrappers:nodeagent:default-node-token"
_ALPHABET = string.ascii_lowercase + string.digits


@dataclass(frozen=True, kw_only=True)
class BootstrapToken:
    token_id: str
    secret: str
    expiration: datetime.datetime

    @property
    def token(self) -> str:
        """What goes into a bootstrap kubeconfig: ``<id>.<secret>``."""
        return f"{self.token_id}.{self.secret}"


def new_token(*, ttl: datetime.timedelta, now: datetime.datetime) -> BootstrapToken:
    def pick(n: int) -> str:
        return "".join(secrets.choice(_ALPHABET) for _ in range(n))

    return BootstrapToken(token_id=pick(6), secret=pick(16), expiration=now + ttl)


def token_secret(token: BootstrapToken) -> dict[str, Any]:
    """The kube-system Secret the apiserver's bootstrap authenticator reads."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": f"bootstrap-token-{token.token_id}", "namespace": "kube-system"},
        "type": "bootstrap.kubernetes.io/token",
        "stringData": {
            "token-id": token.token_id,
            "token-secret": token.secret,
            "expiration": token.expiration.strftime("%Y-%m-%dT%H:%M:%SZ"),
            "usage-bootstrap-authentication": "true",
            "usage-bootstrap-signing": "true",
            "auth-extra-groups": EXTRA_GROUP,
        },
    }


def _group_binding(name: str, *, group: str, cluster_role: str) -> dict[str, Any]:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": name},
        "roleRef": {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "ClusterRole",
            "name": cluster_role,
        },
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": group}],
    }


SERVICE_PROXY_ROLE: dict[str, Any] = {
    "apiVersion": "rbac.authorization.k8s.io/v1",
    "kind": "ClusterRole",
    "metadata": {"name": "nodeagent:service-proxy"},
    "rules": [
        {"apiGroups": [""], "resources": ["services"], "verbs": ["get", "list", "watch"]},
        {
            "apiGroups": ["discovery.k8s.io"],
            "resources": ["endpointslices"],
            "verbs": ["get", "list", "watch"],
        },
    ],
}


def tls_bootstrap_rbac() -> dict[str, Any]:
    """The bindings kubeadm creates so that nodes can join and renew without a human:

    bootstrap tokens may create node-client CSRs, which are auto-approved, and nodes' own renewal
    CSRs are auto-approved too. Plus one for nodeagent's service proxy: nodes may read
    Services and EndpointSlices (``system:node`` has no EndpointSlices; kube-proxy's
    ``system:node-proxier`` would also let a node read every other Node, which the Node
    authorizer forbids on purpose).
    """
    items = [
        _group_binding(
            "nodeagent:kubelet-bootstrap",
            group=BOOTSTRAPPERS,
            cluster_role="system:node-bootstrapper",
        ),
        _group_binding(
            "nodeagent:node-autoapprove-bootstrap",
            group=BOOTSTRAPPERS,
            cluster_role="system:certificates.k8s.io:certificatesigningrequests:nodeclient",
        ),
        _group_binding(
            "nodeagent:node-autoapprove-certificate-rotation",
            group="system:nodes",
            cluster_role="system:certificates.k8s.io:certificatesigningrequests:selfnodeclient",
        ),
        SERVICE_PROXY_ROLE,
        _group_binding(
            "nodeagent:service-proxy", group="system:nodes", cluster_role="nodeagent:service-proxy"
        ),
    ]
    return {"apiVersion": "v1", "kind": "List", "items": items}
