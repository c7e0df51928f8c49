"""kubeconfig files: load one context into an :class:`Endpoint`, and write the node's own.

Supported: ``server`` (https only), ``certificate-authority[-data]``, ``tls-server-name``,
``client-certificate[-data]`` + ``client-key[-data]``, ``token`` / ``tokenFile``, and context
selection (``current-context`` or an explicit name). TLS verification is always on:
``insecure-skip-tls-verify: true`` and ``http://`` servers are refused. Exec and auth-provider
plugins are not supported (a node authenticates with a client certificate or a token).
Relative file paths are resolved against the kubeconfig's directory, as kubectl does.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import os
import re
import ssl
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from nodeagent.errors import ConfigError
from nodeagent.yamlshape import MAX_KUBECONFIG_BYTES, ShapeError, check_yaml_shape, read_capped


@dataclass(frozen=True, kw_only=True)
class Endpoint:
    """Where the apiserver is and who we are to it. Secrets are held in memory, never logged."""

    server: str
    source: str = ""
    ca_pem: bytes | None = field(default=None, repr=False)
    tls_server_name: str | None = None
    client_cert_pem: bytes | None = field(default=None, repr=False)
    client_key_pem: bytes | None = field(default=None, repr=False)
    token: str | None = field(default=None, repr=False)

    @property
    def identity(self) -> str:
        if self.client_cert_pem:
            return "client-certificate"
        return "token" if self.token else "anonymous"

    def ssl_context(self) -> ssl.SSLContext:
        """A verifying TLS context: the kubeconfig CA (or the system store), our client cert."""
        cadata = self.ca_pem.decode("ascii") if self.ca_pem else None
        try:
            ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cadata=cadata)
        except (ssl.SSLError, ValueError) as e:
            raise ConfigError(
                "certificate-authority", f"not a PEM CA bundle: {e}", source=self.source
            ) from e
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        if self.client_cert_pem and self.client_key_pem:
            _load_cert_chain(ctx, self.client_cert_pem, self.client_key_pem, self.source)
        return ctx

    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"} if self.token else {}


def _load_cert_chain(ctx: ssl.SSLContext, cert: bytes, key: bytes, source: str) -> None:
    # ssl can only load a client identity from a file: a 0600 temporary file, removed at once.
    with tempfile.NamedTemporaryFile(prefix="nodeagent-client-", suffix=".pem") as f:
        os.fchmod(f.fileno(), 0o600)
        f.write(cert.rstrip(b"\n") + b"\n" + key)
        f.flush()
        try:
            ctx.load_cert_chain(f.name)
        except ssl.SSLError as e:
            raise ConfigError(
                "client-certificate", f"client certificate and key do not load: {e}", source=source
            ) from e


def load_kubeconfig(path: str | os.PathLike[str], *, context: str | None = None) -> Endpoint:
    """Read and check a kubeconfig: a regular file of at most ``MAX_KUBECONFIG_BYTES``,
    nesting and aliases bounded (``nodeagent.yamlshape``) before it is built."""
    p = Path(path)
    try:
        raw = read_capped(p, MAX_KUBECONFIG_BYTES)
        text = raw.decode("utf-8")
        with contextlib.suppress(yaml.YAMLError):  # safe_load below says so, in its words
            check_yaml_shape(text)
    except OSError as e:
        raise ConfigError("kubeconfig", f"cannot read: {e.strerror}", str(p), source=str(p)) from e
    except UnicodeDecodeError as e:
        raise ConfigError(
            "kubeconfig", f"not UTF-8 text: {e.reason} at byte {e.start}", source=str(p)
        ) from None
    except ShapeError as e:
        raise ConfigError("kubeconfig", e.message, source=str(p)) from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        # Never str(e), never chained: PyYAML quotes the offending lines, and in a bootstrap
        # kubeconfig that line is often the token.
        where = _where(e, text)
        raise ConfigError("kubeconfig", f"not valid YAML{where}", source=str(p)) from None
    return endpoint_from_dict(data, base_dir=p.parent, source=str(p), context=context)


_QUOTED = re.compile(r"'([^'\n]*)'")


def _where(e: yaml.YAMLError, text: str) -> str:
    """Line, column and what PyYAML says is wrong, without any text from the file."""
    if isinstance(e, yaml.reader.ReaderError):
        code = e.character if isinstance(e.character, int) else ord(e.character)
        return f" at character {e.position}: control character U+{code:04X} is not allowed"
    if not isinstance(e, yaml.MarkedYAMLError):
        return ""
    mark = e.problem_mark or e.context_mark
    where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
    problem = ", ".join(p for p in (e.context, e.problem) if p)
    scrubbed = _QUOTED.sub(
        lambda m: "'...'" if len(m.group(1)) > 1 and m.group(1) in text else m.group(0), problem
    )
    return f"{where}: {scrubbed[:200]}" if problem else where


def endpoint_from_dict(
    data: object, *, base_dir: Path, source: str = "", context: str | None = None
) -> Endpoint:
    if not isinstance(data, Mapping):
        raise ConfigError("kubeconfig", "not a kubeconfig mapping", source=source)

    def err(path: str, message: str, value: object = None) -> ConfigError:
        return ConfigError(path, message, value, source=source)

    ctx_name = context or data.get("current-context")
    if not ctx_name:
        raise err("current-context", "no context selected and no current-context set")
    ctx = _named(data, "contexts", "context", ctx_name, err)
    cluster = _named(data, "clusters", "cluster", ctx.get("cluster"), err)
    user = _named(data, "users", "user", ctx["user"], err) if ctx.get("user") else {}

    server = str(cluster.get("server") or "")
    if not server.startswith("https://"):
        raise err("cluster.server", "must be an https:// URL (TLS is required)", server)
    if cluster.get("insecure-skip-tls-verify"):
        raise err("cluster.insecure-skip-tls-verify", "TLS verification cannot be turned off", True)
    for unsupported in ("exec", "auth-provider"):
        if user.get(unsupported):
            raise err(f"user.{unsupported}", "credential plugins are not supported")

    def blob(key: str) -> bytes | None:
        inline, ref = user.get(f"{key}-data") or cluster.get(f"{key}-data"), None
        if inline:
            try:
                return base64.b64decode(str(inline), validate=True)
            except binascii.Error as e:
                raise err(f"{key}-data", "not valid base64") from e
        ref = user.get(key) or cluster.get(key)
        if not ref:
            return None
        file = Path(str(ref))
        file = file if file.is_absolute() else base_dir / file
        try:
            return file.read_bytes()
        except OSError as e:
            raise err(key, f"cannot read: {e.strerror}", str(file)) from e

    token = user.get("token")
    if not token and user.get("tokenFile"):
        tf = Path(str(user["tokenFile"]))
        tf = tf if tf.is_absolute() else base_dir / tf
        try:
            token = tf.read_text(encoding="utf-8").strip()
        except OSError as e:
            raise err("user.tokenFile", f"cannot read: {e.strerror}", str(tf)) from e
    cert, key = blob("client-certificate"), blob("client-key")
    if cert and key:  # one file may hold both (the node's kubelet-client-current.pem)
        cert = pem_blocks(cert, "CERTIFICATE") or cert
        key = pem_blocks(key, *KEY_BLOCKS) or key
    if bool(cert) != bool(key):
        raise err("user", "client-certificate and client-key must be given together")
    return Endpoint(
        server=server.rstrip("/"),
        source=source,
        ca_pem=blob("certificate-authority"),
        tls_server_name=cluster.get("tls-server-name") or None,
        client_cert_pem=cert,
        client_key_pem=key,
        token=str(token) if token else None,
    )


KEY_BLOCKS = ("PRIVATE KEY", "EC PRIVATE KEY", "RSA PRIVATE KEY")


def pem_blocks(data: bytes, *kinds: str) -> bytes:
    """Only the PEM blocks of the given kinds (e.g. ``CERTIFICATE``), in order."""
    out: list[bytes] = []
    keep = False
    for line in data.splitlines(keepends=True):
        if line.startswith(b"-----BEGIN "):
            keep = any(line.strip() == f"-----BEGIN {k}-----".encode() for k in kinds)
        if keep:
            out.append(line)
    return b"".join(out)


def _named(
    data: Mapping[str, Any], listkey: str, inner: str, name: object, err: Any
) -> Mapping[str, Any]:
    for entry in data.get(listkey) or []:
        if isinstance(entry, Mapping) and entry.get("name") == name:
            value = entry.get(inner) or {}
            if not isinstance(value, Mapping):
                raise err(f"{listkey}[{name}]", f"{inner} must be a mapping")
            return value
    raise err(listkey, f"no entry named {name!r}", name)


def render_kubeconfig(*, server: str, ca_pem: bytes | None, cert_file: Path, key_file: Path) -> str:
    """The kubeconfig the node writes after TLS bootstrap (same shape as the kubelet's)."""
    cluster: dict[str, str] = {"server": server}
    if ca_pem:
        cluster["certificate-authority-data"] = base64.b64encode(ca_pem).decode("ascii")
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "default-cluster", "cluster": cluster}],
        "contexts": [
            {
                "name": "default-context",
                "context": {
                    "cluster": "default-cluster",
                    "namespace": "default",
                    "user": "default-auth",
                },
            }
        ],
        "current-context": "default-context",
        "users": [
            {
                "name": "default-auth",
                "user": {"client-certificate": str(cert_file), "client-key": str(key_file)},
            }
        ],
    }
    return yaml.safe_dump(doc, sort_keys=False)
