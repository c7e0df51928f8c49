"""Pods reach the apiserver through the `kubernetes` Service, and see their volumes.

The whole agent on the real control plane and containerd, everything read from inside a
container (CRI ExecSync, as ``kubectl exec`` runs a command):

- a busybox pod gets the default ``kube-api-access-*`` volume and the ``KUBERNETES_SERVICE_*``
  variables; its ``ca.crt`` is the cluster CA. An in-cluster client then uses exactly what the
  container has (its environment, and its token and ``ca.crt`` read through
  ``/proc/<pid>/root``) from the container's network namespace: curl POSTs a SelfSubjectReview
  to ``https://kubernetes.default.svc`` resolved to ``$KUBERNETES_SERVICE_HOST`` (``make up``
  has no cluster DNS yet), verifying the serving certificate with that ``ca.crt``, and the
  apiserver answers that the caller is ``system:serviceaccount:<ns>:default``, bound to that
  pod. curl runs from the host because busybox's wget cannot: its TLS client offers no
  signature_algorithms, and the apiserver (Go's TLS) ends the handshake with alert 40. This
  proves the harness's apiserver address (`controlplane_args.API_ADDRESS`) in the
  `kubernetes` EndpointSlice, the proxy's DNAT of the ClusterIP (the agent runs in the root
  namespace with its proxy on, as ``make up`` runs it, since the pods' bridge is there) and
  the projected volume;
- a downwardAPI volume (labels, annotations, ``limits.memory``) and a projected volume merging
  a configMap, a secret and downwardAPI items with their modes (``stat -L`` through the
  ``..data`` symlink), and a ConfigMap update that reaches the running container within
  syncFrequency + the object cache's TTL (polled; nothing forced).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from agentproc import (
    agent_node,
    api_get,
    container_id,
    create_objects,
    run_in,
    running,
    sleeper_pod,
    wait_ready,
)
from harness.controlplane import ControlPlane
from harness.fixtures_runtime import RuntimeEnv
from podnode import until

from nodeagent.kuberuntime import CriClient

pytestmark = pytest.mark.integration

SA_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
PROXY_TABLE = "nodeagent"  # nodeagent.proxy.settings.TABLE, in the root netns
SYNC_FREQUENCY = 60.0  # the kubelet's default, the agent's pod resync
OBJECT_TTL = 60.0  # the agent's ConfigMap/Secret cache TTL (the kubelet's defaultTTL)
REVIEW = json.dumps({"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"})


def _nft(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["nft", *args], capture_output=True, text=True, check=False)


@contextlib.contextmanager
def host_proxy_table() -> Iterator[None]:
    """The root namespace's ``ip nodeagent`` is this test's for its duration: refuse to run
    over another agent's (a `make up` node), remove it at the end."""
    if _nft("list", "table", "ip", PROXY_TABLE).returncode == 0:
        pytest.fail(
            f"table ip {PROXY_TABLE} already exists in the root network namespace (a `make up` "
            "node?): this test runs its agent's proxy there; `make down` first"
        )
    try:
        yield
    finally:
        _nft("delete", "table", "ip", PROXY_TABLE)


async def container_pid(endpoint: str, container: str) -> int:
    async with CriClient.open(endpoint) as client:
        status = await client.container_status(container, verbose=True)
    return int(json.loads(status.info["info"])["pid"])


def client_files(pid: int, tmp_path: Path) -> tuple[str, str, Path, Path]:
    """What an in-cluster client takes from the container (its environment, its token and
    ``ca.crt`` as the container sees them): (service host, port, header file, CA path)."""
    root = Path(f"/proc/{pid}/root")
    environ = dict(
        item.split("=", 1)
        for item in Path(f"/proc/{pid}/environ").read_text().split("\0")
        if "=" in item
    )
    headers = tmp_path / "headers"
    headers.write_text(
        f"Authorization: Bearer {(root / SA_DIR[1:] / 'token').read_text()}\n"
        "Content-Type: application/json\n"
    )
    host, port = environ["KUBERNETES_SERVICE_HOST"], environ["KUBERNETES_SERVICE_PORT"]
    return host, port, headers, root / SA_DIR[1:] / "ca.crt"


async def wait_default_service_account(control_plane: ControlPlane, namespace: str) -> None:
    await until(
        "the namespace's default ServiceAccount and kube-root-ca.crt",
        lambda: (
            api_get(control_plane, f"/api/v1/namespaces/{namespace}/serviceaccounts/default")
            and api_get(
                control_plane, f"/api/v1/namespaces/{namespace}/configmaps/kube-root-ca.crt"
            )
        ),
        within=30,
    )


def kubernetes_endpoints(control_plane: ControlPlane) -> list[str]:
    slices = api_get(
        control_plane,
        "/apis/discovery.k8s.io/v1/namespaces/default/endpointslices"
        "?labelSelector=kubernetes.io/service-name%3Dkubernetes",
    )
    return [
        f"{address}:{port['port']}"
        for s in (slices or {}).get("items", [])
        for e in s.get("endpoints") or []
        for address in e.get("addresses") or []
        for port in s.get("ports") or []
    ]


async def test_a_container_calls_the_apiserver_through_the_kubernetes_service_with_its_token(
    control_plane: ControlPlane, containerd: RuntimeEnv, tmp_path: Path
) -> None:
    expected = f"{control_plane.address}:{control_plane.ports.apiserver}"
    await until(
        "the apiserver's address in the kubernetes EndpointSlice",
        lambda: kubernetes_endpoints(control_plane) == [expected],
        within=30,
        explain=lambda: kubernetes_endpoints(control_plane),
    )
    with host_proxy_table():
        async with agent_node(
            control_plane, tmp_path, containerd.endpoint, host_proxy=True
        ) as node:
            node.start()
            await wait_ready(control_plane, node, status="True", within=90)
            await wait_default_service_account(control_plane, node.namespace)
            code, answer = control_plane.api_request(
                "POST",
                f"/api/v1/namespaces/{node.namespace}/pods",
                body=sleeper_pod("api", node.namespace, node.name),
            )
            assert code == 201, (code, answer)
            pod = await running(control_plane, node, "api")
            [volume] = [
                v for v in pod["spec"]["volumes"] if v["name"].startswith("kube-api-access-")
            ]
            container = await container_id(containerd.endpoint, node, "api")

            code, env, _ = await run_in(containerd.endpoint, container, "env")
            assert code == 0
            service = api_get(control_plane, "/api/v1/namespaces/default/services/kubernetes")
            assert f"KUBERNETES_SERVICE_HOST={service['spec']['clusterIP']}" in env.splitlines()
            assert "KUBERNETES_SERVICE_PORT=443" in env.splitlines()

            code, ca, _ = await run_in(containerd.endpoint, container, f"cat {SA_DIR}/ca.crt")
            assert code == 0
            assert ca == control_plane.ca_path.read_text()
            code, namespace, _ = await run_in(
                containerd.endpoint, container, f"cat {SA_DIR}/namespace"
            )
            assert (code, namespace) == (0, node.namespace)

            pid = await container_pid(containerd.endpoint, container)
            host, port, headers, ca_file = client_files(pid, tmp_path)

            async def review() -> dict[str, Any] | None:
                done = await asyncio.to_thread(
                    subprocess.run,
                    ["nsenter", f"--net=/proc/{pid}/ns/net", "curl", "-sS", "--max-time", "5",
                     "--cacert", str(ca_file), "-H", f"@{headers}",
                     "--resolve", f"kubernetes.default.svc:{port}:{host}", "--data", REVIEW,
                     f"https://kubernetes.default.svc:{port}"
                     "/apis/authentication.k8s.io/v1/selfsubjectreviews"],
                    capture_output=True,
                    text=True,
                    check=False,
                )  # fmt: skip
                last.append((done.returncode, done.stdout, done.stderr))
                return json.loads(done.stdout) if done.returncode == 0 else None

            last: list[tuple[int, str, str]] = []
            answer = await until(
                "a SelfSubjectReview from the pod's network through the ClusterIP",
                review,
                within=60,
                every=1.0,
                explain=lambda: (last[-1:], volume, node.log_tail(1500)),
            )
            assert answer["kind"] == "SelfSubjectReview", answer
            user = answer["status"]["userInfo"]
            assert user["username"] == f"system:serviceaccount:{node.namespace}:default", user
            assert f"system:serviceaccounts:{node.namespace}" in user["groups"], user
            assert user["extra"]["authentication.kubernetes.io/pod-name"] == ["api"], user
            assert user["extra"]["authentication.kubernetes.io/pod-uid"] == [
                pod["metadata"]["uid"]
            ], user


def volumes_pod(name: str, namespace: str, node: str) -> dict[str, Any]:
    pod = sleeper_pod(name, namespace, node)
    pod["metadata"]["labels"] = {"app": "vols", "tier": "backend"}
    pod["metadata"]["annotations"] = {"note": "hello"}
    [app] = pod["spec"]["containers"]
    app["resources"] = {"limits": {"memory": "64Mi"}}
    app["volumeMounts"] = [
        {"name": "downward", "mountPath": "/etc/downward"},
        {"name": "merged", "mountPath": "/etc/merged"},
        {"name": "cfg", "mountPath": "/etc/cfg"},
    ]
    pod["spec"]["volumes"] = [
        {
            "name": "downward",
            "downwardAPI": {
                "items": [
                    {"path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}},
                    {"path": "annotations", "fieldRef": {"fieldPath": "metadata.annotations"}},
                    {
                        "path": "mem",
                        "resourceFieldRef": {
                            "containerName": "app",
                            "resource": "limits.memory",
                            "divisor": "1Mi",
                        },
                    },
                ]
            },
        },
        {
            "name": "merged",
            "projected": {
                "defaultMode": 0o440,
                "sources": [
                    {
                        "configMap": {
                            "name": "cfg",
                            "items": [{"key": "a", "path": "cfg/a", "mode": 0o400}],
                        }
                    },
                    {"secret": {"name": "sec", "items": [{"key": "s", "path": "sec/s"}]}},
                    {
                        "downwardAPI": {
                            "items": [
                                {
                                    "path": "name",
                                    "fieldRef": {"fieldPath": "metadata.name"},
                                    "mode": 0o444,
                                }
                            ]
                        }
                    },
                ],
            },
        },
        {"name": "cfg", "configMap": {"name": "cfg"}},
    ]
    return pod


async def test_downward_api_projected_volumes_and_a_config_map_update_seen_inside(
    control_plane: ControlPlane, containerd: RuntimeEnv, tmp_path: Path
) -> None:
    async with agent_node(control_plane, tmp_path, containerd.endpoint) as node:
        ns = node.namespace
        create_objects(
            control_plane,
            ns,
            ("configmaps", {"metadata": {"name": "cfg"}, "data": {"a": "one"}}),
            ("secrets", {"metadata": {"name": "sec"}, "stringData": {"s": "hush"}}),
        )
        node.start()
        await wait_ready(control_plane, node, status="True", within=90)
        await wait_default_service_account(control_plane, ns)
        code, answer = control_plane.api_request(
            "POST", f"/api/v1/namespaces/{ns}/pods", body=volumes_pod("vols", ns, node.name)
        )
        assert code == 201, (code, answer)
        await running(control_plane, node, "vols")
        container = await container_id(containerd.endpoint, node, "vols")

        async def read(script: str) -> str:
            code, out, err = await run_in(containerd.endpoint, container, script)
            assert code == 0, (script, code, out, err)
            return out

        assert await read("cat /etc/downward/labels") == 'app="vols"\ntier="backend"'
        assert 'note="hello"' in (await read("cat /etc/downward/annotations")).splitlines()
        assert await read("cat /etc/downward/mem") == "64"

        assert await read("cat /etc/merged/cfg/a /etc/merged/sec/s /etc/merged/name") == (
            "onehushvols"
        )
        modes = await read(
            "cd /etc/merged && for f in cfg/a sec/s name; do "
            'echo "$f $(stat -L -c %a $f) $(readlink -f $f)"; done'
        )
        table = [line.split() for line in modes.splitlines()]
        assert [(f, mode) for f, mode, _ in table] == [
            ("cfg/a", "400"),
            ("sec/s", "440"),
            ("name", "444"),
        ], modes
        data_dir = (await read("readlink /etc/merged/..data")).strip()
        assert data_dir.startswith("..20"), data_dir  # the atomic writer's timestamped directory
        for _, _, target in table:
            assert target.startswith(f"/etc/merged/{data_dir}/"), modes
        assert await read("cat /etc/cfg/a") == "one"

        code, answer = control_plane.api_request(
            "PATCH", f"/api/v1/namespaces/{ns}/configmaps/cfg", body={"data": {"a": "two"}}
        )
        assert code == 200, (code, answer)

        async def updated() -> bool:
            return await read("cat /etc/cfg/a; echo; cat /etc/merged/cfg/a") == "two\ntwo"

        await until(
            "the ConfigMap update inside the running container",
            updated,
            within=SYNC_FREQUENCY + OBJECT_TTL + 30,
            every=2.0,
            explain=lambda: node.log_tail(1500),
        )
