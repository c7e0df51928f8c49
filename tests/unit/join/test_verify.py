"""cluster-info is trusted only when the JWS verifies with the token and the CA is pinned.

Every expected signature and pin here was made by Go's cluster-bootstrap / crypto/x509 and
OpenSSL (``join_vectors``), never by the code under test.
"""

from __future__ import annotations

import base64
from typing import Any

import pytest
from unit.join.join_vectors import (
    BAD_CA_KUBECONFIG,
    BAD_CA_KUBECONFIG_JWS,
    EC_CA,
    EC_PIN,
    JWS_VECTORS,
    KUBECONFIG,
    KUBECONFIG_JWS,
    RSA_CA,
    RSA_PIN,
    TOKEN,
)

from nodeagent.join.token import BootstrapToken, JoinError, parse_pins, parse_token, spki_pins
from nodeagent.join.verify import (
    SignatureMissing,
    cluster_of,
    verify_cluster_info,
    verify_detached_jws,
)

SECRET = TOKEN.split(".")[1]


def configmap(**data: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "data": data}


SIGNED = configmap(**{"kubeconfig": KUBECONFIG, "jws-kubeconfig-abcdef": KUBECONFIG_JWS})


@pytest.mark.parametrize(("content", "token", "signature"), JWS_VECTORS)
def test_signatures_made_by_cluster_bootstrap_verify(
    content: str, token: str, signature: str
) -> None:
    verify_detached_jws(signature, content, parse_token(token))


@pytest.mark.parametrize(("content", "token", "signature"), JWS_VECTORS)
def test_a_changed_content_does_not_verify(content: str, token: str, signature: str) -> None:
    with pytest.raises(JoinError, match="does not verify with the secret of token id"):
        verify_detached_jws(signature, content + "\n", parse_token(token))


def test_another_secret_does_not_verify_and_is_not_shown() -> None:
    wrong = BootstrapToken(token_id="abcdef", secret="0123456789abcdee")
    with pytest.raises(JoinError) as caught:
        verify_detached_jws(KUBECONFIG_JWS, KUBECONFIG, wrong)
    message = str(caught.value)
    assert message == (
        "the JWS signature jws-kubeconfig-abcdef in the cluster-info ConfigMap does not verify "
        'with the secret of token id "abcdef" (bad_signature): can\'t trust this API server; '
        "is the token right?"
    )
    assert "0123456789abcde" not in message


def test_a_signature_for_another_key_id_is_refused() -> None:
    # "hello, world" signed by token 07401b, presented as if for abcdef with 07401b's secret.
    content, token, signature = JWS_VECTORS[2]
    other = BootstrapToken(token_id="abcdef", secret=token.split(".")[1])
    with pytest.raises(JoinError, match="names key id '07401b', not the token id \"abcdef\""):
        verify_detached_jws(signature, content, other)


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


@pytest.mark.parametrize(
    ("signature", "message"),
    [
        pytest.param("garbage", "is not a compact JWS with a detached payload", id="one part"),
        pytest.param(
            KUBECONFIG_JWS.replace("..", "." + b64url(KUBECONFIG.encode()) + "."),
            "is not a compact JWS with a detached payload",
            id="payload attached",
        ),
        pytest.param(
            b64url(b'{"alg":"none","kid":"abcdef"}') + "..c2ln",
            "(unsupported_algorithm: Algorithm of 'none' is not allowed)",
            id="alg none",
        ),
        pytest.param(
            b64url(b'{"alg":"HS512","kid":"abcdef"}') + "..c2ln",
            "(unsupported_algorithm: Algorithm of 'HS512' is not allowed)",
            id="alg HS512",
        ),
        pytest.param("bm90IGpzb24..c2ln", "(decode_error", id="header not JSON"),
    ],
)
def test_malformed_signatures_are_refused(signature: str, message: str) -> None:
    with pytest.raises(JoinError) as caught:
        verify_detached_jws(signature, KUBECONFIG, parse_token(TOKEN))
    assert message in str(caught.value)


@pytest.mark.parametrize(("pem", "pin"), [(EC_CA, EC_PIN), (RSA_CA, RSA_PIN)], ids=["EC", "RSA"])
def test_ca_pins_match_go_and_openssl(pem: str, pin: str) -> None:
    assert spki_pins(pem.encode()) == [pin]


def test_a_bundle_has_a_pin_per_certificate() -> None:
    assert spki_pins((EC_CA + RSA_CA).encode()) == [EC_PIN, RSA_PIN]


def test_signed_and_pinned_cluster_info_is_trusted() -> None:
    info = verify_cluster_info(
        SIGNED, token=parse_token(TOKEN), pins=parse_pins([EC_PIN.upper().replace("SHA", "sha")])
    )
    assert info.server == "https://198.18.0.1:6443"
    assert info.ca_pem == EC_CA.encode()
    assert info.ca_pins == (EC_PIN,)
    assert info.pinned
    assert info.kubeconfig == KUBECONFIG


def test_any_of_several_pins_is_enough() -> None:
    pins = parse_pins([RSA_PIN, EC_PIN])
    assert verify_cluster_info(SIGNED, token=parse_token(TOKEN), pins=pins).pinned


def test_a_ca_matching_no_pin_is_refused_naming_both_sides() -> None:
    with pytest.raises(JoinError) as caught:
        verify_cluster_info(SIGNED, token=parse_token(TOKEN), pins=parse_pins([RSA_PIN]))
    assert str(caught.value) == (
        f"the cluster CA in the cluster-info ConfigMap has public key {EC_PIN}, which matches "
        f"none of the --discovery-token-ca-cert-hash values ({RSA_PIN}): this is not the "
        "cluster you meant, or the hash is wrong"
    )


def test_without_pins_only_the_signature_is_checked() -> None:
    info = verify_cluster_info(SIGNED, token=parse_token(TOKEN), pins=frozenset())
    assert not info.pinned
    assert info.ca_pins == (EC_PIN,)


def test_a_missing_signature_is_the_retryable_kind() -> None:
    with pytest.raises(SignatureMissing) as caught:
        verify_cluster_info(
            configmap(kubeconfig=KUBECONFIG), token=parse_token(TOKEN), pins=frozenset()
        )
    assert str(caught.value).startswith(
        'the cluster-info ConfigMap has no JWS signature for token id "abcdef" '
        "(jws-kubeconfig-abcdef): the token id is not valid for this cluster or it has expired"
    )


def test_no_kubeconfig_means_no_token_bootstrapping() -> None:
    with pytest.raises(JoinError, match="there is no kubeconfig key in the cluster-info"):
        verify_cluster_info(configmap(), token=parse_token(TOKEN), pins=frozenset())


def kubeconfig_with(cluster: str, *, name: str = '""', extra: str = "") -> str:
    return f"apiVersion: v1\nkind: Config\nclusters:\n- name: {name}\n  cluster:\n{cluster}{extra}"


CA_DATA = "    certificate-authority-data: " + base64.b64encode(EC_CA.encode()).decode() + "\n"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param("a: [", "not valid YAML", id="not YAML"),
        pytest.param("- 1\n", "not a mapping", id="a list"),
        pytest.param(
            kubeconfig_with(CA_DATA + "    server: http://x:1\n"),
            "the cluster's server is not an https:// URL: 'http://x:1'",
            id="http server",
        ),
        pytest.param(
            kubeconfig_with("    server: https://x:1\n"),
            "the cluster has no certificate-authority-data",
            id="no CA",
        ),
        pytest.param(
            kubeconfig_with("    server: https://x:1\n    certificate-authority-data: '%%'\n"),
            "certificate-authority-data is not valid base64",
            id="CA not base64",
        ),
        pytest.param(
            kubeconfig_with(CA_DATA + "    server: https://x:1\n", name="a"),
            "the current context is invalid: None",
            id="named cluster, no context",
        ),
    ],
)
def test_a_malformed_kubeconfig_is_named(text: str, message: str) -> None:
    with pytest.raises(JoinError) as caught:
        cluster_of(text)
    assert str(caught.value) == f"malformed kubeconfig in the cluster-info ConfigMap: {message}"


def test_the_current_contexts_cluster_is_used_when_none_is_unnamed() -> None:
    text = kubeconfig_with(
        CA_DATA + "    server: https://x:1/\n",
        name="c",
        extra="contexts:\n- name: ctx\n  context: {cluster: c}\ncurrent-context: ctx\n",
    )
    assert cluster_of(text) == ("https://x:1", EC_CA.encode())


def test_a_ca_that_is_not_a_certificate_is_refused() -> None:
    data = {"kubeconfig": BAD_CA_KUBECONFIG, "jws-kubeconfig-abcdef": BAD_CA_KUBECONFIG_JWS}
    with pytest.raises(JoinError) as caught:
        verify_cluster_info(configmap(**data), token=parse_token(TOKEN), pins=frozenset())
    assert str(caught.value).startswith(
        "the cluster CA in the cluster-info ConfigMap is not a PEM certificate: "
    )
