"""The kubelet's exec credential provider plugins (KEP-2133, with the service-account token
mode of KEP-4412).

- :mod:`.types`: a plugin as the ``CredentialProviderConfig`` file names it (the file named
  by ``node.imageCredentialProviderConfigPath`` is read and checked by
  ``nodeagent.config.credentialproviders``, each plugin found in
  ``node.imageCredentialProviderBinDir``).
- :mod:`.exec`: one run of a plugin: a ``CredentialProviderRequest`` on its stdin, a
  ``CredentialProviderResponse`` read from its stdout, bounded in time (1 minute, the
  kubelet's) and size; anything else is an error that quotes neither stdout nor a token.
- :mod:`.provider`: a plugin as a credential source: ``matchImages``, the response cache
  (``cacheKeyType`` Image / Registry / Global, ``cacheDuration`` or ``defaultCacheDuration``),
  one run for concurrent requests, and the service-account token mode (``tokenAttributes``).
"""

from nodeagent.credentialprovider.plugin.provider import (
    PluginProvider,
    PluginProviders,
    PodIdentity,
    ServiceAccountAccess,
    ServiceAccountInfo,
)
from nodeagent.credentialprovider.plugin.types import ProviderConfig, TokenAttributes

__all__ = [
    "PluginProvider",
    "PluginProviders",
    "PodIdentity",
    "ProviderConfig",
    "ServiceAccountAccess",
    "ServiceAccountInfo",
    "TokenAttributes",
]
