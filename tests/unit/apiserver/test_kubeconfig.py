"""kubeconfig loading: files or inline data, tokens, contexts; TLS verification always on."""

from __future__ import annotations

import base64
import datetime
import ssl
from pathlib import Path
from typing import Any

import pytest
import yaml
from harness.pki import create_authority

from nodeagent.apiserver import load_kubeconfig, render_kubeconfig
from nodeagent.errors import ConfigError


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def write(path: Path, doc: dict[str, Any]) -> Path:
    path.write_text(yaml.safe_dump(doc))
    return path


def kubeconfig(cluster: dict[str, Any], user: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": cluster}],
        "users": [{"name": "u", "user": user}],
        "contexts": [{"name": "ctx", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "ctx",
        **extra,
    }


@pytest.fixture
def pki(tmp_path: Path) -> dict[str, Path]:
    ca = create_authority(
        directory=tmp_path, name="ca", common_name="test-ca", validity=datetime.timedelta(days=1)
    )
    node = ca.issue(
        directory=tmp_path,
        name="node",
        common_name="system:node:n1",
        organizations=("system:nodes",),
    )
    return {"ca": ca.pair.cert, "cert": node.cert, "key": node.key}


def test_file_references_are_resolved_next_to_the_kubeconfig(
    tmp_path: Path, pki: dict[str, Path]
) -> None:
    path = write(
        tmp_path / "kubeconfig",
        kubeconfig(
            {"server": "https://10.0.0.1:6443/", "certificate-authority": "ca.crt"},
            {"client-certificate": "node.crt", "client-key": str(pki["key"])},
        ),
    )

    ep = load_kubeconfig(path)

    assert ep.server == "https://10.0.0.1:6443"
    assert ep.ca_pem == pki["ca"].read_bytes()
    assert ep.client_cert_pem == pki["cert"].read_bytes()
    assert ep.identity == "client-certificate"
    assert isinstance(ep.ssl_context(), ssl.SSLContext)
    assert "BEGIN" not in repr(ep)  # secrets never end up in logs


def test_inline_data_and_an_explicit_context_are_honoured(
    tmp_path: Path, pki: dict[str, Path]
) -> None:
    doc = kubeconfig({"server": "https://a:6443"}, {"token": "unused"})
    doc["clusters"].append(
        {
            "name": "c2",
            "cluster": {
                "server": "https://b:6443",
                "certificate-authority-data": b64(pki["ca"].read_bytes()),
            },
        }
    )
    doc["users"].append({"name": "u2", "user": {"token": "abc.def"}})
    doc["contexts"].append({"name": "other", "context": {"cluster": "c2", "user": "u2"}})

    ep = load_kubeconfig(write(tmp_path / "kc", doc), context="other")

    assert (ep.server, ep.token, ep.ca_pem) == ("https://b:6443", "abc.def", pki["ca"].read_bytes())
    assert ep.headers() == {"Authorization": "Bearer abc.def"}


def test_token_file_is_read(tmp_path: Path) -> None:
    (tmp_path / "token").write_text("t0ken\n")
    ep = load_kubeconfig(
        write(tmp_path / "kc", kubeconfig({"server": "https://a:6443"}, {"tokenFile": "token"}))
    )
    assert ep.token == "t0ken"


@pytest.mark.parametrize(
    ("cluster", "user", "path"),
    [
        pytest.param(
            {"server": "https://a", "insecure-skip-tls-verify": True},
            {},
            "cluster.insecure-skip-tls-verify",
            id="insecure-skip-tls-verify is refused",
        ),
        pytest.param({"server": "http://a:8080"}, {}, "cluster.server", id="plain http is refused"),
        pytest.param(
            {"server": "https://a"},
            {"exec": {"command": "aws"}},
            "user.exec",
            id="exec plugins are refused",
        ),
        pytest.param(
            {"server": "https://a"},
            {"client-certificate-data": b64(b"x")},
            "user",
            id="a certificate without its key is refused",
        ),
    ],
)
def test_unsafe_or_unsupported_kubeconfigs_are_refused(
    tmp_path: Path, cluster: dict[str, Any], user: dict[str, Any], path: str
) -> None:
    kc = write(tmp_path / "kc", kubeconfig(cluster, user))
    with pytest.raises(ConfigError) as info:
        load_kubeconfig(kc)
    assert info.value.path == path
    assert info.value.source == str(kc)


def test_missing_context_is_named(tmp_path: Path) -> None:
    kc = write(tmp_path / "kc", kubeconfig({"server": "https://a"}, {}))
    with pytest.raises(ConfigError, match="no entry named 'nope'"):
        load_kubeconfig(kc, context="nope")


def test_rendered_node_kubeconfig_loads_back(tmp_path: Path, pki: dict[str, Path]) -> None:
    text = render_kubeconfig(
        server="https://a:6443",
        ca_pem=pki["ca"].read_bytes(),
        cert_file=pki["cert"],
        key_file=pki["key"],
    )
    ep = load_kubeconfig(write(tmp_path / "kc", yaml.safe_load(text)))

    assert ep.client_key_pem == pki["key"].read_bytes()
    assert ep.ssl_context() is not None
