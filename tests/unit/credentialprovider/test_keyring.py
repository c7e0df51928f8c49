"""The keyring's matching, as the kubelet's keyring_test.go cases."""

from __future__ import annotations

import base64
import json

import pytest

from nodeagent.credentialprovider import (
    DockerConfigEntry,
    DockerConfigError,
    Keyring,
    PullSecret,
    keyring_from_secrets,
    parse_dockerconfigjson,
    urls_match,
)


@pytest.mark.parametrize(
    ("glob", "target", "match"),
    [
        pytest.param("*.kubernetes.io", "prefix.kubernetes.io", True, id="host wildcard"),
        pytest.param("prefix.*.io", "prefix.kubernetes.io", True, id="middle wildcard"),
        pytest.param("*.kubernetes.io", "kubernetes.io", False, id="part counts differ"),
        pytest.param("kubernetes.io:8080", "kubernetes.io:8080", True, id="same port"),
        pytest.param("kubernetes.io", "kubernetes.io:8080", False, id="port differs"),
        pytest.param("gcr.io/foo", "gcr.io/foo/bar", True, id="path prefix"),
        pytest.param("gcr.io/foo/bar", "gcr.io/foo", False, id="longer path"),
        pytest.param("127.0.0.1:5000", "127.0.0.1:5000/private/busybox", True, id="ip and port"),
    ],
)
def test_urls_match_as_the_kubelets(glob: str, target: str, match: bool) -> None:
    assert urls_match(glob, target) is match


def test_the_most_specific_path_comes_first_and_every_match_is_returned() -> None:
    keyring = Keyring()
    keyring.add(None, {"quay.io": DockerConfigEntry("host", "a")})
    keyring.add(None, {"https://quay.io/v2/coreos": DockerConfigEntry("path", "b")})
    keyring.add(None, {"quay.io": DockerConfigEntry("host-again", "c")})
    found = [c.auth.username for c in keyring.lookup("quay.io/coreos/etcd")]
    assert found == ["path", "host", "host-again"]
    assert [c.auth.username for c in keyring.lookup("quay.io/other")] == ["host", "host-again"]
    assert keyring.lookup("gcr.io/coreos") == []


def test_docker_hub_credentials_serve_docker_io_images() -> None:
    keyring = Keyring()
    keyring.add(None, {"https://index.docker.io/v1/": DockerConfigEntry("hub", "x")})
    assert [c.auth.username for c in keyring.lookup("docker.io/library/busybox")] == ["hub"]
    assert keyring.lookup("registry.example.com/busybox") == []


def test_auth_wins_over_username_and_password_and_may_be_unpadded() -> None:
    auth = base64.b64encode(b"user:pa:ss").decode().rstrip("=")
    config = parse_dockerconfigjson({"auths": {"r.io": {"username": "u", "auth": auth}}})
    assert config["r.io"].username == "user"
    assert config["r.io"].password == "pa:ss"


@pytest.mark.parametrize(
    ("document", "error"),
    [
        pytest.param({"auths": "x"}, "DockerConfigJSON.auths", id="auths not a map"),
        pytest.param({"auths": {"r.io": {"username": 1}}}, "username of type string", id="number"),
        pytest.param(
            {"auths": {"r.io": {"auth": base64.b64encode(b"nocolon").decode()}}},
            "base64(username:password)",
            id="auth without a colon",
        ),
    ],
)
def test_a_malformed_secret_names_itself_and_never_its_content(
    document: object, error: str
) -> None:
    secret = PullSecret(
        namespace="ns",
        name="regcred",
        type="kubernetes.io/dockerconfigjson",
        data={".dockerconfigjson": json.dumps(document).encode()},
    )
    with pytest.raises(DockerConfigError) as e:
        keyring_from_secrets([secret])
    assert 'image pull secret "regcred"' in str(e.value)
    assert error in str(e.value)


def test_secrets_of_other_types_are_skipped_and_credentials_are_tracked() -> None:
    good = PullSecret(
        namespace="ns",
        name="regcred",
        uid="u1",
        type="kubernetes.io/dockercfg",
        data={".dockercfg": b'{"r.io": {"username": "u", "password": "s3cr3t-xyz"}}'},
    )
    opaque = PullSecret(namespace="ns", name="opaque", type="Opaque", data={"x": b"{"})
    keyring = keyring_from_secrets([opaque, good])
    assert keyring is not None
    (found,) = keyring.lookup("r.io/app")
    assert found.source is not None and found.source.secret is not None
    assert found.source.secret.name == "regcred"
    assert found.hash and "s3cr3t-xyz" not in repr(found)
    assert keyring_from_secrets([opaque]) is None
