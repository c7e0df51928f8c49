"""The credentials to pull one image for one pod (the kubelet's
``makeLookupPullCredentialsFunc``): the pod's pull secrets first, then the node's own
credential file (:mod:`nodeagent.credentialprovider.nodekeyring`), then the credential
provider plugins, each keyring answering most specific first. Looked up at most once per
image per sync, and only when needed (a present image under ``NeverVerify`` needs none).
A pull secret that does not parse is a :class:`DockerConfigError` naming it.
"""

from __future__ import annotations

from collections.abc import Sequence

from nodeagent.credentialprovider import PullSecret, TrackedAuthConfig, keyring_from_secrets
from nodeagent.credentialprovider.keyring import union
from nodeagent.credentialprovider.nodekeyring import NodeKeyring
from nodeagent.credentialprovider.plugin import PluginProviders, PodIdentity
from nodeagent.kuberuntime.imageref import parse_image_ref
from nodeagent.kuberuntime.pullrecords import SecretRef, ServiceAccountRef


class ImageCredentials:
    def __init__(
        self, *, plugins: PluginProviders | None = None, node: NodeKeyring | None = None
    ) -> None:
        self._plugins = plugins or PluginProviders()
        self._node = node

    async def lookup(
        self, image: str, secrets: Sequence[PullSecret], pod: PodIdentity | None
    ) -> list[TrackedAuthConfig]:
        """Every credential for ``image``, in the order to try them."""
        repository = parse_image_ref(image).repository
        keyring = keyring_from_secrets(secrets)
        from_secrets = keyring.lookup(repository) if keyring is not None else []
        from_node = await self._node.lookup(repository) if self._node is not None else []
        return union(from_secrets, from_node, await self._plugins.lookup(repository, pod))


def pod_credentials(
    found: Sequence[TrackedAuthConfig],
) -> tuple[list[SecretRef], ServiceAccountRef | None]:
    """What of ``found`` the pull records compare: the secrets (with their credential's
    hash) and the first service account; node-wide credentials are left out."""
    secrets: list[SecretRef] = []
    account = None
    for tracked in found:
        source = tracked.source
        if source is None:
            continue
        if source.secret is not None:
            s = source.secret
            secrets.append(SecretRef(s.namespace, s.name, s.uid, tracked.hash))
        elif source.service_account is not None and account is None:
            a = source.service_account
            account = ServiceAccountRef(a.namespace, a.name, a.uid)
    return secrets, account
