"""The cluster's kubelet configuration, downloaded as ``kubeadm join`` downloads it.

``kubeadm init`` publishes the kubelet settings all nodes share as the ConfigMap
``kube-system/kubelet-config`` (key ``kubelet``: a KubeletConfiguration) and lets bootstrap
tokens read it (Role and RoleBinding ``kubeadm:kubelet-config``: ``get`` on that one ConfigMap for
the groups ``system:bootstrappers:kubeadm:default-node-token`` and ``system:nodes``).
``kubeadm join`` reads it with the bootstrap token over the verified TLS and writes it as the
kubelet's ``config.yaml``; ``nodeagent join`` does the same (:func:`fetch`, then
:func:`from_configmap`), writing it beside the operator's file, never into it (see
:mod:`nodeagent.config.clusterkubelet` for the file and its precedence).

Where kubeadm stops, nodeagent goes on: a cluster that does not publish the ConfigMap (404), or
does not let bootstrap tokens read it (403, what an apiserver without kubeadm's Role answers for
a ConfigMap that is not there either), gets :class:`NotPublished` and the join proceeds with the
operator's configuration alone, saying so. A kubelet needs kubeadm's ``config.yaml`` to start;
nodeagent's own configuration file is complete without it, so the node works as it did before
this download existed. Any other failure to read it, and a ConfigMap that is there but wrong,
stop the join before anything is written.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from nodeagent.apiserver import CONFIGMAPS, Api, ApiClient, Endpoint, Forbidden, NotFound, Obj
from nodeagent.config.clusterkubelet import ClusterKubelet, parse
from nodeagent.join.token import BootstrapToken, JoinError

NAMESPACE: Final = "kube-system"
NAME: Final = "kubelet-config"  # kubeadm's KubeletBaseConfigurationConfigMap
KEY: Final = "kubelet"  # kubeadm's KubeletBaseConfigurationConfigMapKey
WHAT: Final = f"ConfigMap {NAMESPACE}/{NAME}"
SOURCE: Final = f'{WHAT} key "{KEY}"'


@dataclass(frozen=True)
class NotPublished:
    """The cluster has no kubelet configuration for this node to read; ``reason`` says why."""

    reason: str


async def fetch(api: Api) -> Obj | NotPublished:
    """The ConfigMap, or why there is none; other API errors propagate."""
    try:
        return await api.get(CONFIGMAPS, NAME, namespace=NAMESPACE)
    except NotFound:
        return NotPublished(f"{WHAT} does not exist")
    except Forbidden:
        return NotPublished(
            f"the bootstrap token may not get {WHAT} (403): the cluster does not publish it "
            "as kubeadm does (Role and RoleBinding kubeadm:kubelet-config)"
        )


async def fetch_with_token(
    *, server: str, ca_pem: bytes, token: BootstrapToken
) -> Obj | NotPublished:
    """:func:`fetch` with the bootstrap token over TLS verified against the discovered CA."""
    client = ApiClient(endpoint=Endpoint(server=server, ca_pem=ca_pem, token=token.value))
    try:
        return await fetch(client)
    finally:
        await client.aclose()


def from_configmap(configmap: Obj) -> ClusterKubelet:
    """The KubeletConfiguration the ConfigMap holds; ``JoinError`` naming the key when it has
    none, ``ConfigError`` naming the key, the line and the field when it is not one."""
    data = configmap.get("data")
    text = data.get(KEY) if isinstance(data, dict) else None
    if not isinstance(text, str):
        keys = ", ".join(sorted(str(k) for k in data)) if isinstance(data, dict) else "none"
        raise JoinError(
            f'{WHAT} has no key "{KEY}" with a KubeletConfiguration (its keys: {keys}); '
            "nothing was written"
        )
    return parse(text, source=SOURCE)
