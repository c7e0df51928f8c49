"""Registry credentials for image pulls, as the kubelet's ``pkg/credentialprovider``.

- :mod:`.dockerconfig`: the ``.dockercfg`` / ``.docker/config.json`` formats of pull secrets
  (``auth`` as ``base64(user:password)``).
- :mod:`.keyring`: the keyring: registry entries indexed by host, port and path, matched
  against an image most specific first (host wildcards ``*.example.com``), every matching
  credential returned in order so the puller tries each; Docker Hub's ``index.docker.io``
  entry for ``docker.io`` images.
- :mod:`.secrets`: a keyring from a pod's ``imagePullSecrets`` (``kubernetes.io/dockerconfigjson``
  and ``kubernetes.io/dockercfg``), each credential tracked with the secret it came from.
- :mod:`.nodekeyring`: the node's own credential file (``config.json`` under the root dir,
  the working directory, ``$HOME/.docker``; else ``.dockercfg``), read every 5 minutes.
- :mod:`.pullpolicy`: which present images need their pull credentials checked
  (``imagePullCredentialsVerificationPolicy``).
- :mod:`.plugin`: the kubelet's exec credential provider plugins
  (``credentialprovider.kubelet.k8s.io/v1``), their config file, cache and service-account
  token mode.

Credentials are plain values here; their ``repr`` never shows a password or token, so a log
line or an error that formats one shows ``<redacted>``.
"""

from nodeagent.credentialprovider.dockerconfig import (
    DockerConfig,
    DockerConfigEntry,
    DockerConfigError,
    parse_dockercfg,
    parse_dockerconfigjson,
)
from nodeagent.credentialprovider.keyring import (
    AuthConfig,
    CredentialSource,
    Keyring,
    SecretCoordinates,
    ServiceAccountCoordinates,
    TrackedAuthConfig,
    urls_match,
)
from nodeagent.credentialprovider.secrets import PullSecret, keyring_from_secrets

__all__ = [
    "AuthConfig",
    "CredentialSource",
    "DockerConfig",
    "DockerConfigEntry",
    "DockerConfigError",
    "Keyring",
    "PullSecret",
    "SecretCoordinates",
    "ServiceAccountCoordinates",
    "TrackedAuthConfig",
    "keyring_from_secrets",
    "parse_dockercfg",
    "parse_dockerconfigjson",
    "urls_match",
]
