"""Content of configMap, secret, downwardAPI and projected volumes from the real control plane.

The content source runs as the agent runs it: with a node's own credentials
(``system:node:<name>``, so the Node authorizer and NodeRestriction decide what it may read and
which tokens it may request), for a real Pod bound to that node whose ``kube-api-access-*``
volume the apiserver's ServiceAccount admission added. Each volume is set up into a directory
of the test, as the volume manager calls it on each pod sync; the tests read what a container
would read there: the files, their modes, an updated ConfigMap, and a token the apiserver
accepts as the pod's service account, bound to the pod (invalid once the pod is deleted).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import secrets
import ssl
import stat
import time
import urllib.error
import urllib.request
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from nodeagent.apiserver import ApiClient, load_kubeconfig
from nodeagent.clock import RealClock
from nodeagent.podspec import Pod, Volume, decode_pod
from nodeagent.volumemanager.content import ContentSource, VolumeSetupError, content_source

pytestmark = pytest.mark.integration

OBJECT_TTL = 1.0
"""The content source's object TTL in these tests (the agent's is 60 s)."""


@dataclass
class Scene:
    node: str
    namespace: str
    source: ContentSource
    plane: Any

    def kubectl(self, *args: str, **kw: Any) -> Any:
        return self.plane.kubectl(*args, **kw)

    def create(self, obj: dict[str, Any]) -> None:
        obj.setdefault("metadata", {})["namespace"] = self.namespace
        self.kubectl("create", "-f", "-", input=json.dumps(obj))

    def pod(self, name: str, volumes: list[dict[str, Any]], **spec: Any) -> Pod:
        """A Pod bound to the test's node; returned as the apiserver stored it."""
        self.create(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": name, "labels": {"app": "content", "tier": "it"}},
                "spec": {
                    "nodeName": self.node,
                    "containers": [
                        {
                            "name": "main",
                            "image": "registry.invalid/none:1",
                            "resources": {"limits": {"memory": "64Mi"}},
                        }
                    ],
                    "volumes": volumes,
                    **spec,
                },
            }
        )
        return decode_pod(self.plane.get_json("pod", name, "-n", self.namespace))


async def wait_for(what: str, check: Callable[[], bool], within: float = 60.0) -> None:
    deadline = time.monotonic() + within
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.5)


@pytest.fixture
async def scene(control_plane: Any, tmp_path: Path) -> AsyncIterator[Scene]:
    suffix = secrets.token_hex(3)
    node = namespace = f"na-vc-{suffix}"
    kubectl = control_plane.kubectl
    # a Node object, so the pod GC does not collect pods bound to a node that does not exist
    kubectl(
        "create",
        "-f",
        "-",
        input=json.dumps({"kind": "Node", "apiVersion": "v1", "metadata": {"name": node}}),
    )
    kubectl("create", "namespace", namespace)

    def exists(*args: str) -> bool:
        done = kubectl("get", *args, "-n", namespace, check=False)
        return bool(done.returncode == 0)

    api = ApiClient(endpoint=load_kubeconfig(control_plane.node_kubeconfig(node)))
    try:
        # what the controller-manager puts in every namespace
        await wait_for("the default ServiceAccount", lambda: exists("serviceaccount", "default"))
        await wait_for("kube-root-ca.crt", lambda: exists("configmap", "kube-root-ca.crt"))
        source = content_source(api=api, clock=RealClock(), object_ttl=OBJECT_TTL)
        yield Scene(node=node, namespace=namespace, source=source, plane=control_plane)
    finally:
        await api.aclose()
        kubectl(
            "delete", "pods", "--all", "-n", namespace, "--force", "--grace-period=0", check=False
        )
        kubectl("delete", "namespace", namespace, "--wait=false", check=False)
        kubectl("delete", "node", node, "--ignore-not-found", check=False)


def volume(pod: Pod, name: str) -> Volume:
    return next(v for v in pod.spec.volumes if v.name == name)


def target(tmp_path: Path, name: str) -> Path:
    path = tmp_path / name
    path.mkdir(exist_ok=True)
    return path


def visible(path: Path) -> dict[str, tuple[str, str]]:
    """What a container sees in the volume: name -> (content, mode)."""
    out = {}
    for name in sorted(os.listdir(path)):
        if name.startswith(".."):
            continue
        full = path / name
        if full.is_dir():
            for sub, (text, mode) in visible(full).items():
                out[f"{name}/{sub}"] = (text, mode)
        else:
            out[name] = (full.read_text(), oct(stat.S_IMODE(full.stat().st_mode)))
    return out


async def test_config_map_secret_and_downward_api_with_modes_and_updates(
    scene: Scene, tmp_path: Path
) -> None:
    scene.create(
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "cfg"},
            "data": {"app.conf": "color=blue\n", "other": "x"},
            "binaryData": {"blob": "AAEC"},
        }
    )
    scene.create(
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "creds"},
            "stringData": {"password": "hunter2"},
        }
    )
    pod = scene.pod(
        "reader",
        [
            {"name": "cfg", "configMap": {"name": "cfg", "defaultMode": 0o640}},
            {
                "name": "picked",
                "configMap": {
                    "name": "cfg",
                    "items": [{"key": "app.conf", "path": "etc/app.conf", "mode": 0o400}],
                },
            },
            {"name": "creds", "secret": {"secretName": "creds", "defaultMode": 0o440}},
            {"name": "maybe", "configMap": {"name": "not-there", "optional": True}},
            {"name": "maybe-secret", "secret": {"secretName": "nope", "optional": True}},
            {
                "name": "info",
                "downwardAPI": {
                    "items": [
                        {"path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}},
                        {"path": "uid", "fieldRef": {"fieldPath": "metadata.uid"}},
                        {
                            "path": "mem",
                            "resourceFieldRef": {
                                "containerName": "main",
                                "resource": "limits.memory",
                                "divisor": "1Mi",
                            },
                        },
                    ]
                },
            },
        ],
    )
    for name in ("cfg", "picked", "creds", "maybe", "maybe-secret", "info"):
        await scene.source.set_up(pod, volume(pod, name), target(tmp_path, name))

    assert visible(tmp_path / "cfg") == {
        "app.conf": ("color=blue\n", "0o640"),
        "blob": ("\x00\x01\x02", "0o640"),
        "other": ("x", "0o640"),
    }
    assert visible(tmp_path / "picked") == {"etc/app.conf": ("color=blue\n", "0o400")}
    assert visible(tmp_path / "creds") == {"password": ("hunter2", "0o440")}
    assert visible(tmp_path / "maybe") == {}
    assert visible(tmp_path / "maybe-secret") == {}
    assert (tmp_path / "maybe" / "..data").is_symlink()
    assert visible(tmp_path / "info") == {
        "labels": ('app="content"\ntier="it"', "0o644"),
        "uid": (pod.uid, "0o644"),
        "mem": ("64", "0o644"),
    }

    # an update of the ConfigMap reaches the volume on a later sync, in one swap
    before = os.readlink(tmp_path / "cfg" / "..data")
    scene.kubectl(
        "patch",
        "configmap",
        "cfg",
        "-n",
        scene.namespace,
        "--type=merge",
        "-p",
        json.dumps({"data": {"app.conf": "color=red\n", "other": None}}),
    )
    deadline = time.monotonic() + 30
    while (tmp_path / "cfg" / "app.conf").read_text() != "color=red\n":
        assert time.monotonic() < deadline, "the ConfigMap update never reached the volume"
        await asyncio.sleep(0.5)
        await scene.source.set_up(pod, volume(pod, "cfg"), tmp_path / "cfg")
    assert visible(tmp_path / "cfg") == {
        "app.conf": ("color=red\n", "0o640"),
        "blob": ("\x00\x01\x02", "0o640"),
    }
    after = os.readlink(tmp_path / "cfg" / "..data")
    assert after != before
    assert sorted(n for n in os.listdir(tmp_path / "cfg") if n.startswith("..")) == [
        after,
        "..data",
    ]


async def test_missing_objects_fail_with_the_kubelets_message(scene: Scene, tmp_path: Path) -> None:
    pod = scene.pod(
        "waiting",
        [
            {"name": "cfg", "configMap": {"name": "later"}},
            {"name": "creds", "secret": {"secretName": "absent"}},
            {
                "name": "keyed",
                "configMap": {"name": "kube-root-ca.crt", "items": [{"key": "nope", "path": "x"}]},
            },
        ],
    )
    messages = {}
    for name in ("cfg", "creds", "keyed"):
        with pytest.raises(VolumeSetupError) as raised:
            await scene.source.set_up(pod, volume(pod, name), target(tmp_path, name))
        messages[name] = raised.value.message
        assert os.listdir(tmp_path / name) == []
    assert messages == {
        "cfg": 'configmap "later" not found',
        "creds": 'secret "absent" not found',
        "keyed": "configmap references non-existent config key: nope",
    }
    # created later, the ConfigMap is there on the next sync
    scene.create(
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "later"}, "data": {"k": "v"}}
    )
    await scene.source.set_up(pod, volume(pod, "cfg"), tmp_path / "cfg")
    assert visible(tmp_path / "cfg") == {"k": ("v", "0o644")}


def _call(url: str, *, token: str, ca: Path, body: Any = None) -> tuple[int, Any]:
    context = ssl.create_default_context(cafile=str(ca))
    request = urllib.request.Request(
        url,
        method="POST" if body is not None else "GET",
        data=None if body is None else json.dumps(body).encode(),
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=30, context=context) as response:
            return response.status, json.loads(response.read() or b"null")
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read() or b"null")


def review(scene: Scene, token: str) -> dict[str, Any]:
    code, body = scene.plane.api_request(
        "POST",
        "/apis/authentication.k8s.io/v1/tokenreviews",
        body={
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenReview",
            "spec": {"token": token},
        },
    )
    assert code == 201, body
    status: dict[str, Any] = body["status"]
    return status


async def test_kube_api_access_token_is_accepted_and_bound_to_the_pod(
    scene: Scene, tmp_path: Path
) -> None:
    pod = scene.pod("client", [])
    (access,) = [v for v in pod.spec.volumes if v.name.startswith("kube-api-access-")]
    path = target(tmp_path, "sa")
    await scene.source.set_up(pod, access, path)

    files = visible(path)
    assert sorted(files) == ["ca.crt", "namespace", "token"]
    assert files["namespace"] == (scene.namespace, "0o644")
    assert files["ca.crt"][0].startswith("-----BEGIN CERTIFICATE-----")
    token, mode = files["token"]
    assert mode == "0o644"

    # a client in the pod: the volume's CA verifies the apiserver, the token authenticates
    code, whoami = await asyncio.to_thread(
        _call,
        f"{scene.plane.server}/apis/authentication.k8s.io/v1/selfsubjectreviews",
        token=token,
        ca=path / "ca.crt",
        body={"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"},
    )
    assert code == 201, whoami
    user = whoami["status"]["userInfo"]
    assert user["username"] == f"system:serviceaccount:{scene.namespace}:default"
    assert user["extra"]["authentication.kubernetes.io/pod-name"] == ["client"]
    assert user["extra"]["authentication.kubernetes.io/pod-uid"] == [pod.uid]

    # set up again on the next sync: the cached token, nothing rewritten
    data_dir = os.readlink(path / "..data")
    await scene.source.set_up(pod, access, path)
    assert os.readlink(path / "..data") == data_dir

    # bound to the Pod: once the pod is gone the apiserver refuses the token
    assert review(scene, token)["authenticated"] is True
    scene.kubectl("delete", "pod", "client", "-n", scene.namespace, "--force", "--grace-period=0")
    scene.source.forget(pod.uid)
    await wait_for(
        "the token to be refused", lambda: not review(scene, token).get("authenticated"), within=30
    )


async def test_token_with_audience_and_expiry(scene: Scene, tmp_path: Path) -> None:
    pod = scene.pod(
        "vault-client",
        [
            {
                "name": "vault",
                "projected": {
                    "defaultMode": 0o400,
                    "sources": [
                        {
                            "serviceAccountToken": {
                                "path": "vault/token",
                                "audience": "vault",
                                "expirationSeconds": 600,
                            }
                        }
                    ],
                },
            }
        ],
    )
    path = target(tmp_path, "vault")
    await scene.source.set_up(pod, volume(pod, "vault"), path)
    token, mode = visible(path)["vault/token"]
    assert mode == "0o400"
    code, body = scene.plane.api_request(
        "POST",
        "/apis/authentication.k8s.io/v1/tokenreviews",
        body={
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenReview",
            "spec": {"token": token, "audiences": ["vault"]},
        },
    )
    assert code == 201, body
    assert body["status"]["authenticated"] is True
    assert body["status"]["audiences"] == ["vault"]
    # not for the apiserver's own audience
    assert review(scene, token).get("authenticated") is not True


async def test_a_node_cannot_get_tokens_for_pods_of_other_nodes(
    scene: Scene, tmp_path: Path
) -> None:
    other = f"{scene.node}-other"
    scene.kubectl(
        "create",
        "-f",
        "-",
        input=json.dumps({"kind": "Node", "apiVersion": "v1", "metadata": {"name": other}}),
    )
    try:
        scene.create(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": "elsewhere"},
                "spec": {
                    "nodeName": other,
                    "containers": [{"name": "main", "image": "registry.invalid/none:1"}],
                },
            }
        )
        pod = decode_pod(scene.plane.get_json("pod", "elsewhere", "-n", scene.namespace))
        (access,) = [v for v in pod.spec.volumes if v.name.startswith("kube-api-access-")]
        with pytest.raises(VolumeSetupError) as raised:
            await scene.source.set_up(pod, access, target(tmp_path, "sa"))
        # the Node authorizer refuses both the token and the CA bundle: errors aggregated
        message = raised.value.message
        assert message.startswith(
            f'[failed to fetch token: serviceaccounts "default" is forbidden: '
            f'User "system:node:{scene.node}" cannot create resource'
        ), message
        assert ', configmaps "kube-root-ca.crt" is forbidden: User "system:node:' in message
        assert os.listdir(tmp_path / "sa") == []
    finally:
        with contextlib.suppress(Exception):
            scene.kubectl("delete", "node", other, "--ignore-not-found", check=False)


async def test_fs_group_makes_the_token_group_readable(scene: Scene, tmp_path: Path) -> None:
    pod = scene.pod("grouped", [], securityContext={"fsGroup": 2345})
    (access,) = [v for v in pod.spec.volumes if v.name.startswith("kube-api-access-")]
    path = target(tmp_path, "sa")
    await scene.source.set_up(pod, access, path)
    owners = {
        name: ((path / name).stat().st_gid, oct(stat.S_IMODE((path / name).stat().st_mode)))
        for name in ("token", "ca.crt", "namespace")
    }
    assert owners == {
        "token": (2345, "0o640"),
        "ca.crt": (2345, "0o644"),
        "namespace": (2345, "0o644"),
    }
