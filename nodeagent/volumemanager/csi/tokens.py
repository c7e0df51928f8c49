"""Service-account tokens a ``CSIDriver`` asks for (``spec.tokenRequests``), as the kubelet's
``podServiceAccountTokenAttrs`` gets them: one TokenRequest per audience, bound to the pod,
given to ``NodePublishVolume`` as ``csi.storage.k8s.io/serviceAccount.tokens`` (a JSON map
audience -> ``{"token", "expirationTimestamp"}``), in the volume context or, with
``serviceAccountTokenInSecrets``, in the secrets. Never logged."""

from __future__ import annotations

import json
from typing import Any

from nodeagent.apiserver import Api, ApiError
from nodeagent.podspec import Pod
from nodeagent.volumemanager.content.tokens import token_requests
from nodeagent.volumemanager.csi.driverinfo import TOKENS_ATTRIBUTE, DriverInfo
from nodeagent.volumemanager.source import VolumeSetupError


def request_body(pod: Pod, audience: str, expiration_seconds: int | None) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "audiences": [audience] if audience else [],
        "boundObjectRef": {"apiVersion": "v1", "kind": "Pod", "name": pod.name, "uid": pod.uid},
    }
    if expiration_seconds is not None:
        spec["expirationSeconds"] = expiration_seconds
    return {"spec": spec}


async def token_attributes(api: Api | None, pod: Pod, info: DriverInfo) -> dict[str, str]:
    """The tokens attribute for ``pod`` (empty when the driver asks none); raises
    :class:`VolumeSetupError` with the kubelet's words."""
    if not info.token_requests or api is None:
        return {}
    outputs: dict[str, Any] = {}
    for request in info.token_requests:
        try:
            obj = await api.create(
                token_requests(pod.spec.service_account_name),
                request_body(pod, request.audience, request.expiration_seconds),
                namespace=pod.namespace,
            )
        except ApiError as e:
            raise VolumeSetupError(
                "kubernetes.io/csi: mounter.SetUpAt failed to get service accoount token "
                f"attributes: {e.message}"
            ) from e
        status = obj.get("status") or {}
        outputs[request.audience] = {
            "token": status.get("token", ""),
            "expirationTimestamp": status.get("expirationTimestamp"),
        }
    return {TOKENS_ATTRIBUTE: json.dumps(outputs, sort_keys=True, separators=(",", ":"))}
