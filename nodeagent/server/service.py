"""Wiring of the server manager from the configuration (called by the composition root)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import msgspec

from nodeagent.apiserver import Api
from nodeagent.clock import Clock
from nodeagent.config import Config, features
from nodeagent.config.units import Duration
from nodeagent.pods.managers import PodManagers
from nodeagent.server.app import Extension, build_app, build_healthz_app
from nodeagent.server.auth import (
    AlwaysAllow,
    Authorizer,
    RequestAuth,
    WebhookAuthorizer,
    WebhookTokenAuthenticator,
)
from nodeagent.server.endpoints import Dependencies, sync_loop_check
from nodeagent.server.manager import KubeletServer, ServerSettings
from nodeagent.server.servingcert import ServingCertificate, node_addresses
from nodeagent.server.streaming import StreamingDeps

KUBELET_CONFIG_API_VERSION = "kubelet.config.k8s.io/v1beta1"


def _duration(obj: object) -> object:
    if isinstance(obj, Duration):
        return str(obj)
    raise NotImplementedError(type(obj))


def configz(config: Config) -> dict[str, Any]:
    """``/configz``'s ``kubeletconfig``: the effective kubelet section, with its kind."""
    body: dict[str, Any] = msgspec.to_builtins(config.kubelet, enc_hook=_duration)
    return {"kind": "KubeletConfiguration", "apiVersion": KUBELET_CONFIG_API_VERSION, **body}


def pod_lookup(
    pods: PodManagers,
) -> tuple[Callable[[], list[dict[str, Any]]], Callable[[str, str], dict[str, Any] | None]]:
    """(all pods, one pod by namespace and name) as the agent sees them: the API pods bound
    to this node and the static pods."""

    def all_pods() -> list[dict[str, Any]]:
        api = pods.pods_cache.items() if pods.pods_cache is not None else []
        return [*api, *pods.static_pods.items()]

    def find(namespace: str, name: str) -> dict[str, Any] | None:
        """The pod with the newest status the agent computed for it (the API copy's may be
        a write behind)."""
        for pod in all_pods():
            meta = pod.get("metadata") or {}
            if meta.get("namespace") == namespace and meta.get("name") == name:
                status = pods.status.last_status(str(meta.get("uid", "")))
                return {**pod, "status": status} if status is not None else pod
        return None

    return all_pods, find


def server_manager(
    config: Config,
    *,
    api: Api | None,
    clock: Clock,
    node_name: str,
    hostname: str,
    node_ips: Sequence[str],
    pki_dir: Any,
    pods: PodManagers,
    get_node: Callable[[], dict[str, Any] | None] = lambda: None,
    extensions: Sequence[Extension] = (),
) -> KubeletServer:
    k = config.kubelet
    authn, authz = k.authentication, k.authorization
    gates = features.effective(k.feature_gates)
    tokens = None
    if authn.webhook.enabled and api is not None:
        tokens = WebhookTokenAuthenticator(
            api=api, ttl=authn.webhook.cache_ttl.seconds, now=clock.monotonic
        )
    authorizer: Authorizer = AlwaysAllow()
    if authz.mode == "Webhook":
        if api is None:
            raise ValueError("authorization.mode Webhook needs an API server (no kubeconfig)")
        authorizer = WebhookAuthorizer(
            api=api,
            authorized_ttl=authz.webhook.cache_authorized_ttl.seconds,
            unauthorized_ttl=authz.webhook.cache_unauthorized_ttl.seconds,
            now=clock.monotonic,
        )
    auth = RequestAuth(
        tokens=tokens,
        authorizer=authorizer,
        anonymous=authn.anonymous.enabled,
        node_name=node_name,
        fine_grained=gates.get("KubeletFineGrainedAuthz", True),
        streaming_create=config.node.streaming_authorization == "Create",
    )
    all_pods, find_pod = pod_lookup(pods)
    first_seen: list[float] = []

    def started() -> float:
        if not first_seen:
            first_seen.append(clock.monotonic())
        return first_seen[0]

    syncloop = sync_loop_check(
        lambda: pods.sync_loop.heartbeat,
        clock.monotonic,
        sync_frequency=k.sync_frequency.seconds,
        started=started,
    )
    deps = Dependencies(pods=all_pods, configz=configz(config), checks={"syncloop": syncloop})
    stream = StreamingDeps(
        runtime=pods.connection,
        find_pod=find_pod,
        websockets=gates.get("ExtendWebSocketsToKubelet", True),
    )
    settings = ServerSettings(
        address=k.address,
        port=k.port,
        healthz_address=k.healthz_bind_address,
        healthz_port=k.healthz_port,
        tls_cert_file=k.tls_cert_file,
        tls_private_key_file=k.tls_private_key_file,
        client_ca_file=authn.x509.client_ca_file,
        pki_dir=pki_dir,
        hostname=hostname,
        node_ips=tuple(node_ips),
    )

    def app() -> Any:
        started()
        return build_app(auth=auth, deps=deps, stream=stream, extensions=extensions)

    serving = None
    if k.server_tls_bootstrap and not (k.tls_cert_file and k.tls_private_key_file):
        if api is None:
            raise ValueError("serverTLSBootstrap needs an API server (no kubeconfig)")
        serving = ServingCertificate(
            api=api,
            clock=clock,
            node_name=node_name,
            pki_dir=pki_dir,
            addresses=lambda: node_addresses(get_node()),
        )
    return KubeletServer(
        settings=settings,
        app=app,
        healthz_app=lambda: build_healthz_app(deps),
        clock=clock,
        serving=serving,
    )
