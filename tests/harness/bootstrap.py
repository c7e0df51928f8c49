"""API objects for joining nodes: bootstrap-token Secrets, `kube-public/cluster-info`,
`kube-system/kubelet-config` and the RBAC kubeadm installs for them (`kubeadm init`'s
bootstrap-token and upload-config phases of the pinned Kubernetes).

Pure builders; `ControlPlane` applies them with kubectl.
"""

from __future__ import annotations

import base64
import datetime
import hashlib
import secrets
import string
from dataclasses import dataclass
from typing import Any

import yaml
from cryptography import x509
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

# kubeadm's NodeBootstrapTokenAuthGroup: its tokens' auth-extra-groups, and whom its RBAC binds.
EXTRA_GROUP = "system:bootstrappers:kubeadm:default-node-token"
CLUSTER_INFO_ROLE = "kubeadm:bootstrap-signer-clusterinfo"
KUBELET_CONFIG_ROLE = "kubeadm:kubelet-config"  # kubeadm's KubeletBaseConfigMapRole
KUBELET_CONFIG = "kubelet-config"  # kubeadm's KubeletBaseConfigurationConfigMap (key "kubelet")
GET_NODES_ROLE = "kubeadm:get-nodes"
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


GET_NODES_CLUSTER_ROLE: dict[str, Any] = {
    "apiVersion": "rbac.authorization.k8s.io/v1",
    "kind": "ClusterRole",
    "metadata": {"name": GET_NODES_ROLE},
    "rules": [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get"]}],
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
    """The bindings kubeadm creates (same names, same subjects) so that nodes can join and renew
    without a human: its node bootstrap tokens may create node-client CSRs, which are
    auto-approved, and get Nodes (the join's "is this name taken" check); nodes' own renewal
    CSRs are auto-approved too. Plus one for nodeagent's service proxy: nodes may read
    Services and EndpointSlices (``system:node`` has no EndpointSlices; kube-proxy's
    ``system:node-proxier`` would also let a node read every other Node, which the Node
    authorizer forbids on purpose).
    """
    items = [
        _group_binding(
            "kubeadm:kubelet-bootstrap",
            group=EXTRA_GROUP,
            cluster_role="system:node-bootstrapper",
        ),
        GET_NODES_CLUSTER_ROLE,
        _group_binding(GET_NODES_ROLE, group=EXTRA_GROUP, cluster_role=GET_NODES_ROLE),
        _group_binding(
            "kubeadm:node-autoapprove-bootstrap",
            group=EXTRA_GROUP,
            cluster_role="system:certificates.k8s.io:certificatesigningrequests:nodeclient",
        ),
        _group_binding(
            "kubeadm:node-autoapprove-certificate-rotation",
            group="system:nodes",
            cluster_role="system:certificates.k8s.io:certificatesigningrequests:selfnodeclient",
        ),
        SERVICE_PROXY_ROLE,
        _group_binding(
            "nodeagent:service-proxy", group="system:nodes", cluster_role="nodeagent:service-proxy"
        ),
    ]
    return {"apiVersion": "v1", "kind": "List", "items": items}


def cluster_info(*, server: str, ca_pem: bytes) -> dict[str, Any]:
    """`kube-public/cluster-info` as kubeadm writes it: a kubeconfig with one unnamed cluster
    (server and CA, no user). kube-controller-manager's bootstrap signer adds a
    `jws-kubeconfig-<token id>` signature for every signing token."""
    kubeconfig = yaml.safe_dump(
        {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "",
                    "cluster": {
                        "certificate-authority-data": base64.b64encode(ca_pem).decode(),
                        "server": server,
                    },
                }
            ],
            "contexts": [],
            "current-context": "",
            "preferences": {},
            "users": [],
        },
        sort_keys=False,
    )
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "cluster-info", "namespace": "kube-public"},
        "data": {"kubeconfig": kubeconfig},
    }


def _configmap_reader(
    role: str, namespace: str, configmap: str, subjects: list[tuple[str, str]]
) -> dict[str, Any]:
    """A Role that may get one ConfigMap, and its RoleBinding to ``subjects`` (kind, name)."""
    rbac = "rbac.authorization.k8s.io"
    meta = {"name": role, "namespace": namespace}
    rule = {"apiGroups": [""], "resources": ["configmaps"], "resourceNames": [configmap]}
    return {
        "apiVersion": "v1",
        "kind": "List",
        "items": [
            {
                "apiVersion": f"{rbac}/v1",
                "kind": "Role",
                "metadata": meta,
                "rules": [{**rule, "verbs": ["get"]}],
            },
            {
                "apiVersion": f"{rbac}/v1",
                "kind": "RoleBinding",
                "metadata": meta,
                "roleRef": {"apiGroup": rbac, "kind": "Role", "name": role},
                "subjects": [{"apiGroup": rbac, "kind": k, "name": n} for k, n in subjects],
            },
        ],
    }


def cluster_info_rbac() -> dict[str, Any]:
    """kubeadm's Role and RoleBinding: `system:anonymous` may get `cluster-info`, and only it."""
    return _configmap_reader(
        CLUSTER_INFO_ROLE, "kube-public", "cluster-info", [("User", "system:anonymous")]
    )


def kubelet_config(*, cluster_dns: str, cluster_domain: str) -> dict[str, Any]:
    """`kube-system/kubelet-config` as `kubeadm init` publishes it: the KubeletConfiguration
    every joining node runs with, marshalled as Go writes it (the durations kubeadm leaves
    unset as `0s`, empty structs as `{}`).

    The settings are kubeadm's defaults (Webhook authentication and authorization, certificate
    rotation, a serving certificate from the kubelet-serving signer) with the harness's DNS.
    Not here, because the harness's nodes differ: `cgroupDriver` (kubeadm's `systemd`; the
    namespace nodes use cgroupfs, the VM guest systemd, each in its own file) and
    `staticPodPath` (none of them runs static control-plane pods). `serverTLSBootstrap: true`
    means a node serves its API only once its kubelet-serving CSR is approved; nothing
    approves those by default, the harness does as an operator would
    (`join_up.approve_serving_csr`).
    """
    kubelet = {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "authentication": {
            "anonymous": {"enabled": False},
            "webhook": {"cacheTTL": "0s", "enabled": True},
            "x509": {"clientCAFile": "/etc/kubernetes/pki/ca.crt"},
        },
        "authorization": {
            "mode": "Webhook",
            "webhook": {"cacheAuthorizedTTL": "0s", "cacheUnauthorizedTTL": "0s"},
        },
        "clusterDNS": [cluster_dns],
        "clusterDomain": cluster_domain,
        "containerRuntimeEndpoint": "",
        "cpuManagerReconcilePeriod": "0s",
        "crashLoopBackOff": {},
        "evictionPressureTransitionPeriod": "0s",
        "fileCheckFrequency": "0s",
        "healthzBindAddress": "127.0.0.1",
        "httpCheckFrequency": "0s",
        "imageMaximumGCAge": "0s",
        "imageMinimumGCAge": "0s",
        "logging": {
            "flushFrequency": 0,
            "options": {"json": {"infoBufferSize": "0"}, "text": {"infoBufferSize": "0"}},
            "verbosity": 0,
        },
        "memorySwap": {},
        "nodeStatusReportFrequency": "0s",
        "nodeStatusUpdateFrequency": "0s",
        "rotateCertificates": True,
        "runtimeRequestTimeout": "0s",
        "serverTLSBootstrap": True,
        "shutdownGracePeriod": "0s",
        "shutdownGracePeriodCriticalPods": "0s",
        "streamingConnectionIdleTimeout": "0s",
        "syncFrequency": "0s",
        "volumeStatsAggPeriod": "0s",
    }
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": KUBELET_CONFIG, "namespace": "kube-system"},
        "data": {"kubelet": yaml.safe_dump(kubelet, sort_keys=False)},
    }


def kubelet_config_rbac() -> dict[str, Any]:
    """kubeadm's Role and RoleBinding `kubeadm:kubelet-config`: bootstrap tokens (to join) and
    nodes may get `kube-system/kubelet-config`, and only it."""
    return _configmap_reader(
        KUBELET_CONFIG_ROLE,
        "kube-system",
        KUBELET_CONFIG,
        [("Group", "system:nodes"), ("Group", EXTRA_GROUP)],
    )


def ca_cert_hash(ca_pem: bytes) -> str:
    """`sha256:<hex>` of the CA's DER SubjectPublicKeyInfo, as `kubeadm token create
    --print-join-command` prints it."""
    cert = x509.load_pem_x509_certificate(ca_pem)
    spki = cert.public_key().public_bytes(Encoding.DER, PublicFormat.SubjectPublicKeyInfo)
    return f"sha256:{hashlib.sha256(spki).hexdigest()}"


def join_command(*, endpoint: str, token: str, ca_hash: str) -> str:
    """What `kubeadm token create --print-join-command` prints, for nodeagent."""
    return f"nodeagent join {endpoint} --token {token} --discovery-token-ca-cert-hash {ca_hash}"
