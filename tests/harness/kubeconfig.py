"""Write kubeconfig files for the test control plane (admin, components, nodes, bootstrap)."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import yaml
from harness.pki import CertPair, write_private


def _data(path: Path) -> str:
    return base64.b64encode(path.read_bytes()).decode()


def render(
    *,
    server: str,
    ca: Path,
    user: str,
    client: CertPair | None = None,
    token: str | None = None,
    embed: bool = True,
    cluster: str = "nodeagent-test",
) -> dict[str, Any]:
    """A one-cluster, one-user kubeconfig. With `embed`, certificates are inlined as data."""
    if (client is None) == (token is None):
        raise ValueError("give exactly one of client or token")
    cluster_entry: dict[str, str] = {"server": server}
    if embed:
        cluster_entry["certificate-authority-data"] = _data(ca)
    else:
        cluster_entry["certificate-authority"] = str(ca)
    user_entry: dict[str, str] = {}
    if token is not None:
        user_entry["token"] = token
    elif client is not None and embed:
        user_entry["client-certificate-data"] = _data(client.cert)
        user_entry["client-key-data"] = _data(client.key)
    elif client is not None:
        user_entry["client-certificate"] = str(client.cert)
        user_entry["client-key"] = str(client.key)
    context = f"{user}@{cluster}"
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": cluster, "cluster": cluster_entry}],
        "users": [{"name": user, "user": user_entry}],
        "contexts": [{"name": context, "context": {"cluster": cluster, "user": user}}],
        "current-context": context,
        "preferences": {},
    }


def write(path: Path, config: dict[str, Any]) -> Path:
    """Write `config` as YAML, 0600 (it carries a private key or a token)."""
    write_private(path, yaml.safe_dump(config, sort_keys=False).encode())
    return path
