"""``kube-public/cluster-info`` for ``nodeagent join``: the one request made before TLS is trusted.

kubeadm's token discovery asks for the ConfigMap twice, anonymously: first with TLS verification
off (the node does not know the cluster CA yet, and believes nothing in the answer until its
JWS signature and CA pin are checked, :mod:`nodeagent.join.verify`), then again verifying the
server against the CA it just learnt, and the two answers must be the same text. ``ca_pem=None``
is the first request; every other call in nodeagent verifies TLS (:mod:`.kubeconfig`).
"""

from __future__ import annotations

import ssl
from typing import Final

import httpx2 as httpx
import msgspec

from nodeagent.apiserver import errors
from nodeagent.apiserver.client import USER_AGENT, _status_error, _transport_error
from nodeagent.apiserver.kubeconfig import Endpoint
from nodeagent.apiserver.resources import Obj

CLUSTER_INFO_PATH: Final = "/api/v1/namespaces/kube-public/configmaps/cluster-info"


def unverified_context() -> ssl.SSLContext:
    """TLS without server verification: only for the first discovery request."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    return ctx


async def get_cluster_info(
    server: str,
    *,
    ca_pem: bytes | None,
    request_timeout: float = 10.0,
    transport: httpx.AsyncBaseTransport | None = None,
) -> Obj:
    """GET the ConfigMap as ``system:anonymous``; ``ca_pem=None`` skips TLS verification."""
    verify = (
        unverified_context()
        if ca_pem is None
        else Endpoint(server=server, ca_pem=ca_pem).ssl_context()
    )
    async with httpx.AsyncClient(
        base_url=server,
        verify=verify,
        transport=transport,
        trust_env=False,
        timeout=request_timeout,
        headers={"Accept": "application/json", "User-Agent": USER_AGENT},
    ) as client:
        try:
            resp = await client.get(CLUSTER_INFO_PATH)
        except httpx.HTTPError as e:
            raise _transport_error(e, "GET", CLUSTER_INFO_PATH) from e
    if resp.status_code != 200:
        raise _status_error(resp, "GET", CLUSTER_INFO_PATH)
    try:
        obj = msgspec.json.decode(resp.content)
    except msgspec.DecodeError as e:
        raise errors.TransportError(
            f"undecodable answer: {e}", verb="GET", path=CLUSTER_INFO_PATH
        ) from e
    if not isinstance(obj, dict) or obj.get("kind") != "ConfigMap":
        raise errors.TransportError(
            "the answer is not a ConfigMap", verb="GET", path=CLUSTER_INFO_PATH
        )
    return obj
