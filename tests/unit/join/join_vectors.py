"""Vectors made with independent tools, pasted here (never computed by the code under test).

- JWS: ``jws.ComputeDetachedSignature`` of ``k8s.io/cluster-bootstrap`` v0.36.3 (the function
  kube-controller-manager's bootstrap signer and kubeadm's verification both use), run from a
  short Go program over the contents below.
- Pins: OpenSSL made both CAs (``openssl req -x509 -newkey ec|rsa:2048``); their pins are
  ``sha256.Sum256(cert.RawSubjectPublicKeyInfo)`` from Go's crypto/x509 (kubeadm's
  ``pubkeypin.Hash``) and agree with ``openssl x509 -pubkey | openssl pkey -pubin -outform der
  | sha256sum``.
"""

from __future__ import annotations

import base64

TOKEN = "abcdef.0123456789abcdef"
EC_CA = """\
-----BEGIN CERTIFICATE-----
MIIBgTCCASegAwIBAgIUOmbfcdCezLjVxNeSbFbKRThgGFEwCgYIKoZIzj0EAwIw
FTETMBEGA1UEAwwKdGVzdC1jYS1lYzAgFw0yNjExMjcyMDU4MzhaGA8yMTI2MTEw
MzIwNTgzOFowFTETMBEGA1UEAwwKdGVzdC1jYS1lYzBZMBMGByqGSM49AgEGCCqG
SM49AwEHA0IABGisFBCPrX5t2rfZy95V6hOOGALWGExDNM/+e1hkUEHxv+psA9Xa
dXR9mlSzW0+0wgNIQO+dmaFxV2NJQdBaS0qjUzBRMB0GA1UdDgQWBBRlrDYgrou5
SVi0hDSKPfPiuyomyDAfBgNVHSMEGDAWgBRlrDYgrou5SVi0hDSKPfPiuyomyDAP
BgNVHRMBAf8EBTADAQH/MAoGCCqGSM49BAMCA0gAMEUCIQDeUsr6TrrEr9XVr2oa
xENZrg0bhgjftaQEujawp9ZDvwIgS9mXG9Zca7rdnV5HHmVwQ8V1ETwVJllf9pzT
DGh83Rc=
-----END CERTIFICATE-----
"""
EC_PIN = "sha256:22c19c35ae6fa9a7006a8652c5a3494237e2508a29211461dcea62347ceb374c"
RSA_CA = """\
-----BEGIN CERTIFICATE-----
MIIDDzCCAfegAwIBAgIUcuGeFYgBcJuMpWMvpEC7FzNoyMkwDQYJKoZIhvcNAQEL
BQAwFjEUMBIGA1UEAwwLdGVzdC1jYS1yc2EwIBcNMjYxMTI3MjA1ODM5WhgPMjEy
NjExMDMyMDU4MzlaMBYxFDASBgNVBAMMC3Rlc3QtY2EtcnNhMIIBIjANBgkqhkiG
9w0BAQEFAAOCAQ8AMIIBCgKCAQEAvch/o14L9VLNqBafASV4TpIZmHz5OjARrPES
mW/1ZgjvvNnYJW4G9DP4jE7GhqD2XZ/H2uhK6OuquezNqDzpNQDhK26nlfZtRMdF
sK3HYyjhA5+juyzUchD1pg7FhndYfn6yxzcpl5FKTMWm19ccTds/1V49nrq2A45G
2P3e4XJAriCiW2vVv9MicMlHg3/1QNwK7yJNNOTCv9YL03MTnXJzIi1zxlGw0Tkl
WHUGgfcdd3yEEv4kgU6aDbYbKORkABwY0ARGBA48A1pAc11GWI0h6XXbzD3EYgZw
Fh1HaOj0HjI3p/nA4CMtBLBANCeVnjGrrtKmcStt4+l5SnSygQIDAQABo1MwUTAd
BgNVHQ4EFgQU8y6qQJUZ9A3E7prbYR1JBGgRYPAwHwYDVR0jBBgwFoAU8y6qQJUZ
9A3E7prbYR1JBGgRYPAwDwYDVR0TAQH/BAUwAwEB/zANBgkqhkiG9w0BAQsFAAOC
AQEARsEqJyRtjNLeOhvs0nSH2Vm5q9/k/wsx1h3LUKnXK8xz+qyOswWJvO/XahfZ
oKE95xhalZug4kRrQlO/JRykRFvvzhr5Hq2EIxO0NNYjyGM6BVucpBwfBaCzzE7p
3IF7i37gpesIZR/OCmJCvlVxMD9aODW4+MeelSp7GM+ACuzU2qQ3Nl/DYnJc4Mh5
TxFoWhqwR0O1K4Vdy5OO4wDJ/YOD0RL9JxtRRQ62JCoqtv0zEuAq/uvyum179HlZ
eJIZZxO82do49SMfr5DIbzFgfwH8wmYRA5ucGAqpr27YpT5rseS1VByAQCBIwIar
7XuCXpKeNvhTtrEIuCttgUcGBA==
-----END CERTIFICATE-----
"""
RSA_PIN = "sha256:f95b1d7759919e9c03c858d2f8d14f34f4007b459f7164fd29675a588647f30f"

# The cluster-info kubeconfig as kubeadm writes it (unnamed cluster), with EC_CA inline.
KUBECONFIG = (
    "apiVersion: v1\n"
    "clusters:\n"
    "- cluster:\n"
    "    certificate-authority-data: " + base64.b64encode(EC_CA.encode()).decode() + "\n"
    "    server: https://198.18.0.1:6443\n"
    '  name: ""\n'
    "contexts: null\n"
    'current-context: ""\n'
    "kind: Config\n"
    "preferences: {}\n"
    "users: null\n"
)
KUBECONFIG_JWS = (
    "eyJhbGciOiJIUzI1NiIsImtpZCI6ImFiY2RlZiJ9..bXMKfrBsj4Cu0uJnwqUeYZHwOOkhwbumvHYf6ySY6SM"
)
# (content, token, detached JWS)
JWS_VECTORS = [
    (
        "",
        TOKEN,
        "eyJhbGciOiJIUzI1NiIsImtpZCI6ImFiY2RlZiJ9..MO2tlCpY1xB334qWeOe_XEv9c6DIMRNmKJZImOzY17k",
    ),
    (
        "apiVersion: v1\nkind: Config\n",
        TOKEN,
        "eyJhbGciOiJIUzI1NiIsImtpZCI6ImFiY2RlZiJ9..vH_kT4yiol-nrAWgjfCYqvum5wsKETXe0S7OOp1VgnE",
    ),
    (
        "hello, world",
        "07401b.f395accd246ae52d",
        "eyJhbGciOiJIUzI1NiIsImtpZCI6IjA3NDAxYiJ9..uuUzdxwy4zPilEuwuxmFwLQka9Y0eWvsujcfeFnaI1E",
    ),
    (KUBECONFIG, TOKEN, KUBECONFIG_JWS),
]
# Signed, but its CA data is not a certificate.
BAD_CA_KUBECONFIG = (
    'apiVersion: v1\nkind: Config\nclusters:\n- name: ""\n  cluster:\n'
    "    server: https://x:1\n    certificate-authority-data: bm90IGEgY2VydGlmaWNhdGU=\n"
)
BAD_CA_KUBECONFIG_JWS = (
    "eyJhbGciOiJIUzI1NiIsImtpZCI6ImFiY2RlZiJ9..cqL5X6zKQM_vGfttBYeH70UVPR8Xf3jr3xIRw-h5zAA"
)
# KUBECONFIG with the server's port changed to 6444, signed too.
CHANGED_KUBECONFIG = KUBECONFIG.replace("6443", "6444")
CHANGED_KUBECONFIG_JWS = (
    "eyJhbGciOiJIUzI1NiIsImtpZCI6ImFiY2RlZiJ9..3FKcdc4QLhHWtDuY9MMz4FYpPEezjk1koaHgZIOT44s"
)
