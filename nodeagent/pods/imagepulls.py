"""How the daemon pulls images (:func:`image_options`), and what image pulls read from the
API: a pod's ``imagePullSecrets`` (the kubelet's
``getPullSecretsForPod``) and, for credential provider plugins in service-account token
mode, the pod's ServiceAccount and a token for it.

A pull secret that cannot be read (missing, forbidden, the API unreachable) is left out and
named in one Warning Event ``FailedToRetrieveImagePullSecret`` "Unable to retrieve some image
pull secrets (<names>); attempting to pull the image may not succeed.", and the pull goes on
without it, as the kubelet's does; entries without a name are ignored. The secrets are read
when an image needs credentials, at most once per sync.

ServiceAccounts that ``imagePullSecrets`` name reach the pod through the apiserver's
ServiceAccount admission, which copies them into the pod's spec: the node reads only the
pod's list.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Sequence
from typing import Any, Final

from nodeagent.apiserver import Api, ApiError, Resource
from nodeagent.clock import Clock
from nodeagent.config import Config, features
from nodeagent.config.credentialproviders import load_providers
from nodeagent.credentialprovider import PullSecret, pullpolicy
from nodeagent.credentialprovider.nodekeyring import NodeKeyring
from nodeagent.credentialprovider.plugin import (
    PluginProvider,
    PluginProviders,
    ServiceAccountInfo,
)
from nodeagent.events import ObjectEventSink, pod_reference
from nodeagent.kuberuntime.credentials import ImageCredentials
from nodeagent.kuberuntime.images import ImageOptions
from nodeagent.kuberuntime.puller import parallel_limit
from nodeagent.kuberuntime.pullmanager import PullManager
from nodeagent.kuberuntime.pullrecords import PullRecords
from nodeagent.log import Logger, get_logger
from nodeagent.podspec import Pod
from nodeagent.volumemanager.content.tokens import token_requests

SECRETS: Final = Resource("", "v1", "secrets", "Secret", namespaced=True)
SERVICE_ACCOUNTS: Final = Resource("", "v1", "serviceaccounts", "ServiceAccount", namespaced=True)
FAILED_TO_RETRIEVE: Final = "FailedToRetrieveImagePullSecret"


def decode_pull_secret(obj: dict[str, Any], namespace: str, name: str) -> PullSecret:
    meta = obj.get("metadata") or {}
    data: dict[str, bytes] = {}
    for key, value in (obj.get("data") or {}).items():
        try:
            data[str(key)] = base64.b64decode(str(value), validate=True)
        except (binascii.Error, ValueError):
            continue
    return PullSecret(
        namespace=namespace,
        name=name,
        uid=str(meta.get("uid", "")),
        type=str(obj.get("type", "")),
        data=data,
    )


class ApiPullSecrets:
    def __init__(self, *, api: Api, events: ObjectEventSink, log: Logger | None = None) -> None:
        self._api = api
        self._events = events
        self._log = log or get_logger("podsync")

    async def for_pod(self, pod: Pod) -> Sequence[PullSecret]:
        found: list[PullSecret] = []
        failed: list[str] = []
        for ref in pod.spec.image_pull_secrets:
            if not ref.name:
                continue
            try:
                obj = await self._api.get(SECRETS, ref.name, namespace=pod.namespace)
            except (ApiError, OSError) as e:
                self._log.info(
                    "Unable to retrieve pull secret, the image pull may not succeed.",
                    pod=f"{pod.namespace}/{pod.name}",
                    secret=f"{pod.namespace}/{ref.name}",
                    err=str(e),
                )
                failed.append(ref.name)
                continue
            found.append(decode_pull_secret(obj, pod.namespace, ref.name))
        if failed:
            self._events.record_for(
                pod_reference(pod),
                "Warning",
                FAILED_TO_RETRIEVE,
                f"Unable to retrieve some image pull secrets ({', '.join(failed)}); attempting "
                "to pull the image may not succeed.",
            )
        return found


class ApiServiceAccounts:
    """The service-account token mode's API calls (ServiceAccount GET, TokenRequest)."""

    def __init__(self, *, api: Api) -> None:
        self._api = api

    async def service_account(self, namespace: str, name: str) -> ServiceAccountInfo:
        try:
            obj = await self._api.get(SERVICE_ACCOUNTS, name, namespace=namespace)
        except ApiError as e:
            raise LookupError(str(e)) from None
        meta = obj.get("metadata") or {}
        annotations = meta.get("annotations") or {}
        return ServiceAccountInfo(
            uid=str(meta.get("uid", "")),
            annotations={str(k): str(v) for k, v in annotations.items()},
        )

    async def token(
        self,
        namespace: str,
        name: str,
        *,
        audience: str,
        pod_name: str,
        pod_uid: str,
        service_account_uid: str,
    ) -> str:
        body = {
            "metadata": {"uid": service_account_uid},
            "spec": {
                "audiences": [audience],
                "boundObjectRef": {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "name": pod_name,
                    "uid": pod_uid,
                },
            },
        }
        try:
            obj = await self._api.create(token_requests(name), body, namespace=namespace)
        except ApiError as e:
            raise LookupError(str(e)) from None
        token = (obj.get("status") or {}).get("token")
        if not isinstance(token, str) or not token:
            raise LookupError("the TokenRequest's status has no token")
        return token


def image_options(config: Config, *, api: Api | None, clock: Clock, root_dir: str) -> ImageOptions:
    """How the daemon pulls images: ``serializeImagePulls``/``maxParallelImagePulls``,
    ``registryPullQPS``/``registryBurst``, the
    node's credential file (``config.json`` under the root dir, ...), the credential provider
    plugins of ``node.imageCredentialProviderConfigPath`` (raises
    ``ProviderConfigError``), and the pull records under ``<rootDir>/image_manager`` with
    ``imagePullCredentialsVerificationPolicy`` (gate ``KubeletEnsureSecretPulledImages``)."""
    k, node = config.kubelet, config.node
    gates = features.effective(k.feature_gates)
    token_mode = gates["KubeletServiceAccountTokenForCredentialProviders"]
    plugins = []
    if node.image_credential_provider_config_path:
        accounts = ApiServiceAccounts(api=api) if api is not None else None
        plugins = [
            PluginProvider(
                p, monotonic=clock.monotonic, service_accounts=accounts, token_mode=token_mode
            )
            for p in load_providers(
                node.image_credential_provider_config_path,
                node.image_credential_provider_bin_dir,
                gates,
            )
        ]
    pull_manager = None
    if gates["KubeletEnsureSecretPulledImages"]:
        pull_manager = PullManager(
            records=PullRecords(root_dir, now=clock.now),
            policy=pullpolicy.enforcer(
                k.image_pull_credentials_verification_policy,
                k.preloaded_images_verification_allowlist,
            ),
        )
    return ImageOptions(
        parallel=parallel_limit(k.serialize_image_pulls, k.max_parallel_image_pulls),
        qps=k.registry_pull_qps,
        burst=k.registry_burst,
        credentials=ImageCredentials(
            plugins=PluginProviders(plugins),
            node=NodeKeyring(root_dir=root_dir, monotonic=clock.monotonic),
        ),
        pull_manager=pull_manager,
        pod_identities=token_mode,
    )
