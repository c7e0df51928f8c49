"""A keyring from a pod's image pull secrets, as the kubelet's ``MakeDockerKeyring``.

A ``kubernetes.io/dockerconfigjson`` secret with a non-empty ``.dockerconfigjson`` key, or a
``kubernetes.io/dockercfg`` secret with a non-empty ``.dockercfg`` key, adds its entries, each
tracked with the secret's coordinates; secrets of any other type or without the key are
skipped, as the kubelet skips them. A secret whose content does not parse fails the whole
lookup with a :class:`DockerConfigError` naming the secret (the kubelet fails the pull with
the JSON error; nodeagent adds which secret it was).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final

from nodeagent.credentialprovider.dockerconfig import (
    DockerConfigError,
    loads,
    parse_dockercfg,
    parse_dockerconfigjson,
)
from nodeagent.credentialprovider.keyring import CredentialSource, Keyring, SecretCoordinates

DOCKER_CONFIG_JSON_TYPE: Final = "kubernetes.io/dockerconfigjson"
DOCKER_CONFIG_JSON_KEY: Final = ".dockerconfigjson"
DOCKERCFG_TYPE: Final = "kubernetes.io/dockercfg"
DOCKERCFG_KEY: Final = ".dockercfg"


@dataclass(frozen=True, slots=True)
class PullSecret:
    """A Secret as the keyring needs it: coordinates, type and decoded data."""

    namespace: str
    name: str
    uid: str = ""
    type: str = ""
    data: Mapping[str, bytes] = field(default_factory=dict, repr=False)

    def __repr__(self) -> str:
        return f"PullSecret({self.namespace}/{self.name}, type={self.type!r})"


def keyring_from_secrets(secrets: Sequence[PullSecret]) -> Keyring | None:
    """The keyring of the secrets that hold docker credentials; None when none does."""
    keyring = Keyring()
    found = 0
    for secret in secrets:
        if secret.type == DOCKER_CONFIG_JSON_TYPE and secret.data.get(DOCKER_CONFIG_JSON_KEY):
            parse, key = parse_dockerconfigjson, DOCKER_CONFIG_JSON_KEY
        elif secret.type == DOCKERCFG_TYPE and secret.data.get(DOCKERCFG_KEY):
            parse, key = parse_dockercfg, DOCKERCFG_KEY
        else:
            continue
        try:
            config = parse(loads(secret.data[key]))
        except DockerConfigError as e:
            raise DockerConfigError(f'image pull secret "{secret.name}" ({key}): {e}') from e
        coords = SecretCoordinates(uid=secret.uid, namespace=secret.namespace, name=secret.name)
        keyring.add(CredentialSource(secret=coords), config)
        found += 1
    return keyring if found else None
