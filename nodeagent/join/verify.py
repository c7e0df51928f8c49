"""Trust in ``kube-public/cluster-info``, as kubeadm's token discovery earns it (pure).

The ConfigMap is fetched before the node knows the cluster CA, so nothing in it is believed
until two checks pass (``cmd/kubeadm/app/discovery/token`` of the pinned Kubernetes):

1. **The JWS signature.** kube-controller-manager's bootstrap signer puts
   ``jws-kubeconfig-<token id>`` next to ``kubeconfig`` for every bootstrap token marked
   ``usage-bootstrap-signing``: a compact JWS with a detached payload (RFC 7515 Appendix F,
   ``<header>..<signature>``), HS256 keyed with the token's secret, header
   ``{"alg":"HS256","kid":"<token id>"}``. Only someone who knows the secret could have made it,
   so a valid one says the ``kubeconfig`` text came from the cluster the token belongs to.
   Verified with joserfc (RFC 7515 with detached content; the token's 16-byte secret is below
   RFC 7518's recommended HMAC key size, which jwcrypto refuses and PyJWT warns about: the
   choice is recorded in docs/dependencies.md). kubeadm recomputes the signature and compares
   strings; here the header must name HS256 and the token id as ``kid``, which is the same test.
2. **The CA's public-key pin.** The token may be known to more parties than the cluster (it
   travels in a join command), so the ``certificate-authority-data`` must also hash to one of
   the operator's ``--discovery-token-ca-cert-hash`` values: SHA-256 of a certificate's DER
   SubjectPublicKeyInfo. ``--discovery-token-unsafe-skip-ca-verification`` skips only this.

A refusal names what did not match (token id, key id, pins) and never shows the secret.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

import yaml

from nodeagent.join.token import BootstrapToken, JoinError, spki_pins
from nodeagent.yamlshape import ShapeError, check_yaml_shape

CLUSTER_INFO: Final = "cluster-info"
KUBECONFIG_KEY: Final = "kubeconfig"
JWS_PREFIX: Final = "jws-kubeconfig-"
ALGORITHM: Final = "HS256"


class SignatureMissing(JoinError):
    """No signature for this token id yet: kubeadm keeps asking until its discovery timeout
    (the signer adds it a moment after a token is created; a wrong id never gets one)."""


@dataclass(frozen=True, kw_only=True)
class ClusterInfo:
    """The verified cluster: where its apiserver is and the CA that signs its certificate."""

    kubeconfig: str = field(repr=False)  # the signed text, as served
    server: str
    ca_pem: bytes = field(repr=False)
    ca_pins: tuple[str, ...]  # the CA bundle's pins, in order
    pinned: bool  # False under --discovery-token-unsafe-skip-ca-verification


def signed_kubeconfig(configmap: Mapping[str, Any], token: BootstrapToken) -> str:
    """The ConfigMap's ``kubeconfig`` text once its JWS for ``token`` verifies."""
    data = configmap.get("data") or {}
    if not isinstance(data, Mapping):
        raise JoinError(f"the {CLUSTER_INFO} ConfigMap's data is not a mapping")
    kubeconfig = data.get(KUBECONFIG_KEY)
    if not isinstance(kubeconfig, str) or not kubeconfig:
        raise JoinError(
            f"there is no {KUBECONFIG_KEY} key in the {CLUSTER_INFO} ConfigMap: this API server "
            "is not set up for token bootstrapping"
        )
    key = JWS_PREFIX + token.token_id
    signature = data.get(key)
    if not isinstance(signature, str) or not signature:
        raise SignatureMissing(
            f"the {CLUSTER_INFO} ConfigMap has no JWS signature for token id "
            f'"{token.token_id}" ({key}): the token id is not valid for this cluster or it '
            "has expired (or the controller-manager's bootstrap signer has not signed it yet); "
            "create a new token on the control plane"
        )
    verify_detached_jws(signature, kubeconfig, token)
    return kubeconfig


def verify_detached_jws(signature: str, content: str, token: BootstrapToken) -> None:
    """Raise ``JoinError`` unless ``signature`` is the token's HS256 detached JWS of ``content``."""
    from joserfc import jws
    from joserfc.errors import JoseError
    from joserfc.jwk import OctKey

    what = f"the JWS signature {JWS_PREFIX}{token.token_id} in the {CLUSTER_INFO} ConfigMap"
    parts = signature.split(".")
    if len(parts) != 3 or parts[1] != "" or not parts[0] or not parts[2]:
        raise JoinError(f"{what} is not a compact JWS with a detached payload (header..signature)")
    try:
        verified = jws.deserialize_compact(
            signature, OctKey.import_key(token.secret), algorithms=[ALGORITHM], payload=content
        )
    except JoseError as e:
        detail = f"{e.error}: {e.description}" if e.description else e.error
        raise JoinError(
            f'{what} does not verify with the secret of token id "{token.token_id}" ({detail}): '
            "can't trust this API server; is the token right?"
        ) from None
    kid = verified.headers().get("kid")
    if kid != token.token_id:
        raise JoinError(f'{what} names key id {kid!r}, not the token id "{token.token_id}"')


def verify_cluster_info(
    configmap: Mapping[str, Any], *, token: BootstrapToken, pins: frozenset[str]
) -> ClusterInfo:
    """The whole check: signature, kubeconfig shape, then the CA pin. Empty ``pins`` skip the
    pin: the caller made sure that means ``--discovery-token-unsafe-skip-ca-verification``."""
    text = signed_kubeconfig(configmap, token)
    server, ca_pem = cluster_of(text)
    try:
        actual = spki_pins(ca_pem)
    except ValueError as e:
        raise JoinError(
            f"the cluster CA in the {CLUSTER_INFO} ConfigMap is not a PEM certificate: {e}"
        ) from None
    if not actual:
        raise JoinError(f"the cluster CA in the {CLUSTER_INFO} ConfigMap holds no certificate")
    if pins and not any(pin.partition(":")[2] in pins for pin in actual):
        wanted = ", ".join(f"sha256:{p}" for p in sorted(pins))
        raise JoinError(
            f"the cluster CA in the {CLUSTER_INFO} ConfigMap has public key "
            f"{', '.join(actual)}, which matches none of the --discovery-token-ca-cert-hash "
            f"values ({wanted}): this is not the cluster you meant, or the hash is wrong"
        )
    return ClusterInfo(
        kubeconfig=text, server=server, ca_pem=ca_pem, ca_pins=tuple(actual), pinned=bool(pins)
    )


def cluster_of(text: str) -> tuple[str, bytes]:
    """(server, CA PEM) of the kubeconfig's cluster, chosen as kubeadm's
    ``GetClusterFromKubeConfig`` does: the unnamed one, else the current context's."""

    def bad(why: str) -> JoinError:
        return JoinError(f"malformed kubeconfig in the {CLUSTER_INFO} ConfigMap: {why}")

    try:
        check_yaml_shape(text)
        doc = yaml.safe_load(text)
    except (ShapeError, yaml.YAMLError):
        raise bad("not valid YAML") from None
    if not isinstance(doc, Mapping):
        raise bad("not a mapping")
    clusters = {
        c.get("name"): c.get("cluster") for c in doc.get("clusters") or [] if isinstance(c, Mapping)
    }
    cluster = clusters.get("")
    if cluster is None:
        contexts = {
            c.get("name"): c.get("context")
            for c in doc.get("contexts") or []
            if isinstance(c, Mapping)
        }
        current = contexts.get(doc.get("current-context"))
        if not isinstance(current, Mapping):
            raise bad(f"the current context is invalid: {doc.get('current-context')!r}")
        cluster = clusters.get(current.get("cluster"))
    if not isinstance(cluster, Mapping):
        raise bad("no cluster")
    server = cluster.get("server")
    if not isinstance(server, str) or not server.startswith("https://"):
        raise bad(f"the cluster's server is not an https:// URL: {server!r}")
    try:
        ca_pem = base64.b64decode(
            str(cluster.get("certificate-authority-data") or ""), validate=True
        )
    except binascii.Error:
        raise bad("certificate-authority-data is not valid base64") from None
    if not ca_pem:
        raise bad("the cluster has no certificate-authority-data")
    return server.rstrip("/"), ca_pem
