"""A local image registry (Debian's `docker-registry`, distribution v2) and a push client.

    reg = start_registry(base_dir=Path("/tmp/r"))
    push_image(reg.host, images["busybox"].layout, "busybox:latest")  # 127.0.0.1:PORT/busybox
    reg.stop()

With ``login=("user", "password")`` the registry asks for that login (basic auth, an
``htpasswd`` file with a bcrypt hash made by Apache's ``htpasswd``, as distribution requires):
every request without it gets 401, so an image there needs a pull secret. ``push_image`` takes
the same ``login``.

The registry listens on 127.0.0.1 on a free port over plain HTTP and stores blobs under
`base_dir/storage`; its access log (one line per request) is in `reg.log_path`. There is no
docker or skopeo here, so `push_image` speaks the registry API directly: each blob is skipped if
HEAD finds it, else uploaded with one POST + monolithic PUT `?digest=`, then the manifest is PUT
under the tag with its OCI media type.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import shutil
import socket
import subprocess
import urllib.error
import urllib.request
from pathlib import Path

from harness import processes
from harness.images import oci

REGISTRY = shutil.which("docker-registry") or "/usr/bin/docker-registry"
HTPASSWD = shutil.which("htpasswd") or "/usr/bin/htpasswd"
REALM = "nodeagent-test-registry"
LOCALHOST = "127.0.0.1"
START_TIMEOUT = 20.0
START_ATTEMPTS = 3


@dataclasses.dataclass(frozen=True, slots=True)
class Registry:
    base_dir: Path
    port: int
    pid: int
    log_path: Path
    proc: processes.Proc | None = dataclasses.field(default=None, compare=False, repr=False)
    login: tuple[str, str] | None = dataclasses.field(default=None, repr=False)
    address: str = LOCALHOST

    @property
    def host(self) -> str:
        """`127.0.0.1:PORT`: the registry part of image names and the hosts.toml key."""
        return f"{self.address}:{self.port}"

    @property
    def url(self) -> str:
        return f"http://{self.host}"

    def image(self, repository_and_tag: str) -> str:
        """`busybox:latest` -> `127.0.0.1:PORT/busybox:latest`."""
        return f"{self.host}/{repository_and_tag}"

    def stop(self) -> None:
        stop_registry(self.base_dir, proc=self.proc)


def _free_port(address: str = LOCALHOST) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((address, 0))
        port: int = sock.getsockname()[1]
        return port


def render_config(
    *, storage: Path, port: int, htpasswd: Path | None = None, address: str = LOCALHOST
) -> str:
    auth = (
        f"""auth:
  htpasswd:
    realm: {REALM}
    path: {json.dumps(str(htpasswd))}
"""
        if htpasswd is not None
        else ""
    )
    return (
        auth
        + f"""version: 0.1
log:
  level: warn
  formatter: text
  accesslog:
    disabled: false
storage:
  filesystem:
    rootdirectory: {json.dumps(str(storage))}
  delete:
    enabled: true
  maintenance:
    uploadpurging:
      enabled: false
http:
  addr: {address}:{port}
health:
  storagedriver:
    enabled: false
"""
    )


def basic_auth(login: tuple[str, str] | None) -> dict[str, str]:
    if login is None:
        return {}
    token = base64.b64encode(f"{login[0]}:{login[1]}".encode()).decode()
    return {"Authorization": f"Basic {token}"}


def write_htpasswd(path: Path, login: tuple[str, str]) -> None:
    """One bcrypt entry (distribution accepts bcrypt only), made by Apache's htpasswd."""
    done = subprocess.run(
        [HTPASSWD, "-B", "-b", "-n", login[0], login[1]],
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
    )
    path.write_text(done.stdout)
    path.chmod(0o600)


def _answers(url: str, login: tuple[str, str] | None = None) -> bool:
    request = urllib.request.Request(f"{url}/v2/", headers=basic_auth(login))
    try:
        with urllib.request.urlopen(request, timeout=2) as response:
            return bool(response.status == 200)
    except (OSError, urllib.error.URLError):
        return False


def start_registry(
    base_dir: Path,
    *,
    log_path: Path | None = None,
    detached: bool = False,
    login: tuple[str, str] | None = None,
    address: str = LOCALHOST,
) -> Registry:
    """Start the registry on a free port; return once `GET /v2/` answers 200.

    The log goes to `log_path` (default `base_dir/registry.log`, removed by stop). A port taken
    between picking and binding it is retried with another one. `address` is where it
    listens: 127.0.0.1, or the apiserver's 198.18.0.1 for nodes in network namespaces.
    """
    for attempt in range(1, START_ATTEMPTS + 1):
        try:
            return _start_once(
                base_dir, log_path=log_path, detached=detached, login=login, address=address
            )
        except processes.StartupError:
            if attempt == START_ATTEMPTS:
                raise
    raise AssertionError("unreachable")


def _start_once(
    base_dir: Path,
    *,
    log_path: Path | None,
    detached: bool,
    login: tuple[str, str] | None,
    address: str,
) -> Registry:
    log = log_path or base_dir / "registry.log"
    base_dir.mkdir(parents=True, exist_ok=True)
    (base_dir / "storage").mkdir(exist_ok=True)
    port = _free_port(address)
    config = base_dir / "config.yml"
    htpasswd = None
    if login is not None:
        htpasswd = base_dir / "htpasswd"
        write_htpasswd(htpasswd, login)
    config.write_text(
        render_config(storage=base_dir / "storage", port=port, htpasswd=htpasswd, address=address)
    )
    proc = processes.start(
        name="registry",
        argv=[REGISTRY, "serve", str(config)],
        log=log,
        detached=detached,
    )
    (base_dir / "registry.pid").write_text(str(proc.pid))
    registry = Registry(
        base_dir=base_dir,
        port=port,
        pid=proc.pid,
        log_path=log,
        proc=proc,
        login=login,
        address=address,
    )
    try:
        processes.wait_for(
            lambda: _answers(registry.url, login),
            what=f"the registry on {registry.host}",
            timeout=START_TIMEOUT,
            watch=[proc],
        )
    except BaseException:
        stop_registry(base_dir, proc=proc)
        raise
    return registry


def stop_registry(base_dir: Path, *, proc: processes.Proc | None = None) -> None:
    """Stop the registry rooted at `base_dir` and remove its storage. Idempotent.

    `proc` is the handle from `start_registry` in this process; else the pid file is used.
    """
    pid_file = base_dir / "registry.pid"
    if proc is not None:
        proc.stop(timeout=10)
    elif pid_file.exists():
        processes.stop_pid(int(pid_file.read_text()), binary=REGISTRY, timeout=10)
    shutil.rmtree(base_dir, ignore_errors=True)


def _request(
    method: str, url: str, *, data: bytes | None = None, headers: dict[str, str] | None = None
) -> tuple[int, dict[str, str]]:
    req = urllib.request.Request(url, data=data, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=60) as response:
            return response.status, dict(response.headers)
    except urllib.error.HTTPError as err:
        if method == "HEAD" and err.code == 404:
            return 404, {}
        detail = err.read().decode(errors="replace")
        raise RuntimeError(f"{method} {url}: {err.code} {detail}") from err


def push_blob(
    base: str, repository: str, blob: bytes, digest: str, *, login: tuple[str, str] | None = None
) -> bool:
    """Upload one blob unless the registry has it; True if it was uploaded."""
    auth = basic_auth(login)
    status, _ = _request("HEAD", f"{base}/v2/{repository}/blobs/{digest}", headers=auth)
    if status == 200:
        return False
    _, headers = _request("POST", f"{base}/v2/{repository}/blobs/uploads/", data=b"", headers=auth)
    location = headers["Location"]
    if location.startswith("/"):
        location = base + location
    sep = "&" if "?" in location else "?"
    _request(
        "PUT",
        f"{location}{sep}digest={digest}",
        data=blob,
        headers={"Content-Type": "application/octet-stream", **auth},
    )
    return True


def push_image(
    host: str, layout: Path, reference: str, *, login: tuple[str, str] | None = None
) -> str:
    """Push the (first) image of an OCI layout as `host/reference`; returns its digest."""
    base = f"http://{host}"
    repository, tag = oci.split_name(reference)
    descriptor = oci.read_index(layout)[0]
    manifest_bytes = oci.read_blob(layout, descriptor["digest"])
    manifest = json.loads(manifest_bytes)
    for blob in [manifest["config"], *manifest["layers"]]:
        push_blob(
            base, repository, oci.read_blob(layout, blob["digest"]), blob["digest"], login=login
        )
    _request(
        "PUT",
        f"{base}/v2/{repository}/manifests/{tag}",
        data=manifest_bytes,
        headers={"Content-Type": descriptor["mediaType"], **basic_auth(login)},
    )
    digest: str = descriptor["digest"]
    return digest
